"""The account's own operations over HTTP: its audit log (the records are the audit domain's)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from wagate.accounts.access import Administrator, GatewayDep
from wagate.audit import service
from wagate.audit.models import AuditAction
from wagate.audit.schemas import ENTRY_EXAMPLE, AuditLogOut, entry_view
from wagate.http.limits import MAX_BIG_ID
from wagate.http.openapi import ADMINISTRATOR_REQUIRED, errors
from wagate.http.responses import FastJSONResponse as JSONResponse

router = APIRouter()

DESCRIPTION = """\
Who changed what of the account, and when, newest first: API keys created and revoked, webhooks
created, changed, enabled, disabled and deleted, inbox members added and removed, channels created,
changed, paused and resumed, and the secret key's rotation. Each entry names its actor (`api_key`
with the key's name, `dashboard` with the signed-in user's email, `provisioning`, `cli`, `system`),
the action, its target and what changed; a token or secret shows only as `set` or `replaced`.
Entries are written in the transaction of the change they record. Administrators only.

Paging: up to `limit` entries (1-200, default 50); when there are more, `next_before` holds the id to
pass as `before` for the next page. `action` keeps one kind of change (`webhook.created`).
"""


@router.get(
    "/accounts/{account_id}/audit_log",
    summary="List the audit log",
    description=DESCRIPTION,
    response_model=AuditLogOut,
    responses={
        200: {
            "description": "The entries, newest first",
            "content": {"application/json": {"example": {"data": [ENTRY_EXAMPLE], "next_before": None}}},
        },
        **errors(
            401,
            403,
            422,
            503,
            codes={403: ADMINISTRATOR_REQUIRED},
            _403="Another account, or not an administrator (`administrator_required`)",
            _422="`limit`, `before` or `action` is not valid (`invalid_request`, the field in `details`)",
        ),
    },
)
async def list_audit_log(
    gateway: GatewayDep,
    principal: Administrator,
    limit: Annotated[
        int, Query(ge=1, le=service.PAGE_LIMIT_MAX, description="At most this many (1-200)")
    ] = 50,
    before: Annotated[
        int | None,
        Query(
            ge=1, le=MAX_BIG_ID, description="An entry id (`next_before` of the page before): older entries"
        ),
    ] = None,
    action: Annotated[
        AuditAction | None, Query(description="Only this kind of change", examples=["api_key.revoked"])
    ] = None,
) -> JSONResponse:
    async with gateway.db.read() as session:
        page = await service.audit_page(
            session, account_id=principal.account_id, before=before, action=action, limit=limit
        )
    return JSONResponse({"data": [entry_view(e) for e in page.rows], "next_before": page.next_before})
