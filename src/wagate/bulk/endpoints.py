from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Header, Request
from sqlalchemy.orm import Session

from wagate.accounts.auth import Principal, account_member
from wagate.bulk import service
from wagate.bulk.schemas import SendBulkRequest, SendBulkResponse
from wagate.idempotency import service as idempotency
from wagate.idempotency.http import answer_once
from wagate.responses import FastJSONResponse as JSONResponse

router = APIRouter()
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing, unknown or revoked API key"},
    403: {"description": "Another account, not an administrator, or not a member of the channel's inbox"},
    404: {"description": "Unknown channel or batch (batches are kept 7 days)"},
    422: {"description": "Invalid request; `error.code` says which rule"},
}


def administrator(principal: Principal = Depends(account_member)) -> Principal:
    principal.require_administrator()
    return principal


@router.post(
    "/accounts/{account_id}/whatsapp/bulk_messages",
    status_code=202,
    response_model=SendBulkResponse,
    responses={
        **ERRORS,
        409: {"description": "Idempotency-Key in use"},
        429: {"description": "The channel's bulk queue is full; see Retry-After"},
    },
)
async def send_bulk(
    body: SendBulkRequest,
    request: Request,
    principal: Principal = Depends(administrator),
    idempotency_key: str | None = Header(None),
) -> JSONResponse:
    state = request.app.state
    return await answer_once(
        request, principal, body, idempotency_key, lambda idem: _accept(state, principal, body, idem)
    )


async def _accept(
    state: Any, principal: Principal, body: SendBulkRequest, idem: idempotency.IdempotentRequest | None
) -> JSONResponse:
    batch = await service.prepare_batch(
        state.lookups, principal=principal, request=body, settings=state.settings, secret_box=state.secret_box
    )
    response = batch.response
    dispatcher = state.dispatcher

    def unit(session: Session) -> None:
        service.store_batch(session, batch, notify_others=not dispatcher.owns(batch.channel_id))
        if idem is not None:
            idempotency.remember_response(
                session,
                idem,
                idempotency.StoredResponse(202, response),
                ttl_seconds=state.settings.idempotency_ttl_seconds,
            )

    await state.db.write(unit, large=True)
    dispatcher.wake(batch.channel_id)
    dispatcher.wake_events()
    return JSONResponse(response, status_code=202)


@router.get("/accounts/{account_id}/whatsapp/bulk_messages/{batch_id}", responses=ERRORS)
async def get_batch(
    batch_id: str, request: Request, principal: Principal = Depends(administrator)
) -> JSONResponse:
    state = request.app.state
    async with state.db.read() as session:
        view = await service.read_batch(session, account_id=principal.account_id, batch_id=batch_id)
    await state.lookups.channel(principal, view["channel_id"])  # inbox membership (403)
    return JSONResponse(view)
