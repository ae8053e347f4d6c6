"""Settings for administrators (issue 12, point 2): API keys, inboxes and their members, templates,
and the audit log of their changes (issue 14, point 6).

Each page calls the services the API and the CLI use (wagate.accounts.service, wagate.channels.service,
wagate.templates.service) with the signed-in administrator; agents get the 403 page. The route names and
labels of `/settings/api-keys` are a contract (API.md section 12).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from wagate.accounts.access import GatewayDep
from wagate.accounts.service import (
    SessionUser,
    account_users,
    api_key_page,
    create_api_key,
    revoke_key,
)
from wagate.audit.models import AuditAction
from wagate.audit.service import audit_page, parse_action
from wagate.channels.service import (
    account_channels,
    account_inboxes,
    add_inbox_member,
    remove_inbox_member,
)
from wagate.core.errors import ChannelNotFound, InvalidRequest, WagateError
from wagate.dashboard import views
from wagate.dashboard.web import current_administrator, error_page, posted_form, render
from wagate.http.limits import MAX_BIG_ID, MAX_ID, parse_id
from wagate.runtime.gateway import Gateway
from wagate.templates.service import request_template_sync, template_page, template_sync_states

router = APIRouter(include_in_schema=False)
Administrator = Annotated[SessionUser, Depends(current_administrator)]
Cursor = Annotated[int | None, Query(ge=1, le=MAX_ID)]

KEYS_PER_PAGE = 50
AUDIT_ENTRIES_PER_PAGE = 50
INBOXES_PER_PAGE = 20
TEMPLATES_PER_PAGE = 50
# The channels a templates page lists (with their sync) and offers as a filter.
CHANNELS_SHOWN = 200

# What a page says after an action, by the word its redirect carries (never text from the URL).
NOTICES = {
    "revoked": "The key is revoked: requests with it are refused from now on.",
    "added": "Member added: their API keys and dashboard can use this inbox now.",
    "already-member": "That user is a member of this inbox already.",
    "removed": "Member removed: their API keys are refused on this inbox from now on.",
    "not-member": "That user was not a member of this inbox.",
    "sync-started": (
        "Sync started: the templates are being fetched from the channel's WhatsApp Business Account. "
        "This page updates when it is done."
    ),
    "sync-running": "A sync of this channel is under way already: this page updates when it is done.",
}


def _notice(request: Request) -> str | None:
    return NOTICES.get(request.query_params.get("done", ""))


def _form_id(form: dict[str, str], field: str) -> int:
    """A positive id a form posted (a select's value), or 422."""
    value = parse_id(form.get(field))
    if value is None:
        raise InvalidRequest(f"Choose a {field.removesuffix('_id')} from the list.")
    return value


# --- API keys ---------------------------------------------------------------------------------------


async def _keys_context(gateway: Gateway, user: SessionUser, before: int | None) -> dict[str, Any]:
    async with gateway.db.read() as session:
        page = await api_key_page(
            session, account_id=user.principal.account_id, before_id=before, limit=KEYS_PER_PAGE
        )
        users = await account_users(session, account_id=user.principal.account_id)
    return {"page": page, "users": users, "before": before}


@router.get("/settings/api-keys")
async def api_keys(
    request: Request, gateway: GatewayDep, user: Administrator, before: Cursor = None
) -> HTMLResponse:
    context = await _keys_context(gateway, user, before)
    return render(request, "settings_keys.html", notice=_notice(request), **context)


@router.post("/settings/api-keys")
async def create_key(request: Request, gateway: GatewayDep, user: Administrator) -> HTMLResponse:
    """Issue a key and show its token, this once, on the page that answers the form."""
    form = await posted_form(request, user)
    name = form.get("name", "")
    try:
        owner = _form_id(form, "user_id") if form.get("user_id") else user.principal.user_id
        issued = await create_api_key(
            gateway, account_id=user.principal.account_id, user_id=owner, name=name, by=user.principal
        )
    except WagateError as error:
        context = await _keys_context(gateway, user, None)
        return render(
            request,
            "settings_keys.html",
            status_code=error.status_code,
            form_error=views.error_words(error),
            draft_name=name,
            draft_owner=form.get("user_id", ""),
            **context,
        )
    context = await _keys_context(gateway, user, None)
    owner_row = next((u for u in context["users"] if u.id == issued.key.user_id), None)
    return render(request, "settings_keys.html", issued=issued, issued_owner=owner_row, **context)


@router.post("/settings/api-keys/{key_id}/revoke")
async def revoke(
    request: Request, gateway: GatewayDep, user: Administrator, key_id: Annotated[int, views.PathId]
) -> Response:
    await posted_form(request, user)
    try:
        await revoke_key(gateway, account_id=user.principal.account_id, key_id=key_id, by=user.principal)
    except WagateError as error:
        return error_page(request, error)
    return RedirectResponse("/settings/api-keys?done=revoked", status_code=303)


# --- inboxes ----------------------------------------------------------------------------------------


@router.get("/settings/inboxes")
async def inboxes(
    request: Request, gateway: GatewayDep, user: Administrator, after: Cursor = None
) -> HTMLResponse:
    async with gateway.db.read() as session:
        page = await account_inboxes(
            session, principal=user.principal, after_id=after, limit=INBOXES_PER_PAGE
        )
        users = await account_users(session, account_id=user.principal.account_id)
    return render(
        request,
        "settings_inboxes.html",
        page=page,
        users=users,
        after=after,
        notice=_notice(request),
        changed=request.query_params.get("inbox"),
    )


def _back_to_inbox(request: Request, channel_id: int, done: str) -> RedirectResponse:
    after = request.query_params.get("after")
    page = f"after={after}&" if after and after.isdigit() else ""
    return RedirectResponse(
        f"/settings/inboxes?{page}done={done}&inbox={channel_id}#inbox-{channel_id}", status_code=303
    )


@router.post("/settings/inboxes/{channel_id}/members")
async def add_member(
    request: Request, gateway: GatewayDep, user: Administrator, channel_id: Annotated[int, views.PathId]
) -> Response:
    form = await posted_form(request, user)
    try:
        added = await add_inbox_member(
            gateway, principal=user.principal, channel_id=channel_id, user_id=_form_id(form, "user_id")
        )
    except WagateError as error:
        return error_page(request, error)
    return _back_to_inbox(request, channel_id, "added" if added else "already-member")


@router.post("/settings/inboxes/{channel_id}/members/{user_id}/remove")
async def remove_member(
    request: Request,
    gateway: GatewayDep,
    user: Administrator,
    channel_id: Annotated[int, views.PathId],
    user_id: Annotated[int, views.PathId],
) -> Response:
    await posted_form(request, user)
    try:
        removed = await remove_inbox_member(
            gateway, principal=user.principal, channel_id=channel_id, user_id=user_id
        )
    except WagateError as error:
        return error_page(request, error)
    return _back_to_inbox(request, channel_id, "removed" if removed else "not-member")


# --- templates --------------------------------------------------------------------------------------


@router.get("/settings/templates")
async def templates(
    request: Request,
    gateway: GatewayDep,
    user: Administrator,
    channel: Cursor = None,
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
    part: str | None = None,
) -> HTMLResponse:
    """The channels with their sync and the templates (of one channel, or all), a page at a time;
    `?part=sync` and `?part=list` are the parts the page fetches again while a sync is under way."""
    try:
        async with gateway.db.read() as session:
            channels, _ = await account_channels(session, principal=user.principal, limit=CHANNELS_SHOWN)
            if channel is not None and channel not in {c.id for c in channels}:
                raise ChannelNotFound()
            shown = [channel] if channel is not None else [c.id for c in channels]
            listing = await template_page(
                session,
                channel_ids=shown,
                offset=(page - 1) * TEMPLATES_PER_PAGE,
                limit=TEMPLATES_PER_PAGE,
            )
            states = await template_sync_states(session, channels=channels)
    except WagateError as error:
        return error_page(request, error)
    return render(
        request,
        {"sync": "_settings_templates_sync.html", "list": "_settings_templates_list.html"}.get(
            part or "", "settings_templates.html"
        ),
        channels=channels,
        names={c.id: c.name for c in channels},
        states=states,
        under_way=any(state.under_way for state in states.values()),
        listing=listing,
        channel=channel,
        page_number=page,
        notice=_notice(request),
    )


@router.post("/settings/templates/sync")
async def sync_templates(request: Request, gateway: GatewayDep, user: Administrator) -> Response:
    form = await posted_form(request, user)
    try:
        channel_id = _form_id(form, "channel_id")
        started = await request_template_sync(gateway, principal=user.principal, channel_id=channel_id)
    except WagateError as error:
        return error_page(request, error)
    done = "sync-started" if started else "sync-running"
    back = form.get("back_channel", "")
    where = f"channel={back}&" if back.isdigit() else ""
    return RedirectResponse(f"/settings/templates?{where}done={done}", status_code=303)


# --- the audit log ------------------------------------------------------------------------------------

# The filter's choices, by area; the values are the API's `action`.
AUDIT_ACTIONS: dict[str, list[str]] = {}
for _action in AuditAction:
    AUDIT_ACTIONS.setdefault(_action.value.split(".")[0].replace("_", " ").capitalize(), []).append(
        _action.value
    )


@router.get("/settings/audit")
async def audit_log(
    request: Request,
    gateway: GatewayDep,
    user: Administrator,
    before: Annotated[int | None, Query(ge=1, le=MAX_BIG_ID)] = None,  # audit entries have BIGINT ids
    action: Annotated[str | None, Query(max_length=60)] = None,
) -> HTMLResponse:
    """Who changed what, newest first, `AUDIT_ENTRIES_PER_PAGE` at a time (the API's list_audit_log)."""
    try:
        chosen = parse_action(action)
        async with gateway.db.read() as session:
            page = await audit_page(
                session,
                account_id=user.principal.account_id,
                before=before,
                action=chosen,
                limit=AUDIT_ENTRIES_PER_PAGE,
            )
    except WagateError as error:
        return error_page(request, error)
    return render(
        request,
        "settings_audit.html",
        page=page,
        action=chosen.value if chosen else "",
        actions=AUDIT_ACTIONS,
        before=before,
    )
