"""The dashboard's conversations (API.md section 12): the list, a conversation, its status, a reply, a
retry, and the live stream of changes the pages follow. Routes, labels and `data-` attributes are a
contract: browser tests outside the project rely on them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sse_starlette import EventSourceResponse

from wagate.accounts.access import GatewayDep
from wagate.accounts.service import SessionUser
from wagate.conversations.models import ConversationStatus
from wagate.conversations.service import (
    NEEDS_REPLY,
    ConversationRow,
    change_conversation_status,
    conversation_for,
    conversations_for,
    window_of,
)
from wagate.core.errors import InvalidRequest, WagateError
from wagate.dashboard import views
from wagate.dashboard.live_stream import live_events
from wagate.dashboard.template_picker import form_parameters, reply_templates_for
from wagate.dashboard.thread_messages import messages_of
from wagate.dashboard.web import (
    SESSION_COOKIE,
    current_user,
    error_page,
    posted_form,
    read_cookie,
    render,
)
from wagate.http.limits import MAX_ID, parse_id
from wagate.messages.queries import failed_reply
from wagate.messages.service import accept_send

router = APIRouter(include_in_schema=False)
User = Annotated[SessionUser, Depends(current_user)]


def _status_tab(status: str | None) -> ConversationStatus:
    try:
        return ConversationStatus(status or "open")
    except ValueError:
        raise InvalidRequest("status must be open, pending or resolved") from None


def _cursor(before: str | None) -> tuple[datetime, int] | None:
    """The next page's cursor, as the page wrote it: `<ISO time>_<id>`."""
    if not before:
        return None
    at, _, conversation_text = before.rpartition("_")
    conversation_id = parse_id(conversation_text)
    try:
        if conversation_id is None:
            raise ValueError
        return datetime.fromisoformat(at.replace("Z", "+00:00")), conversation_id
    except ValueError:
        raise InvalidRequest("before is not a cursor of this list") from None


def _list_view(status: str | None) -> ConversationStatus | str:
    """The list's view: a status tab, or "Needs reply" (`status=needs_reply`)."""
    return NEEDS_REPLY if status == NEEDS_REPLY else _status_tab(status)


@router.get("/conversations")
async def conversations(
    request: Request,
    gateway: GatewayDep,
    user: User,
    status: str | None = None,
    inbox: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    q: Annotated[str | None, Query(max_length=100)] = None,
    before: Annotated[str | None, Query(max_length=100)] = None,
    fragment: bool = False,
) -> HTMLResponse:
    try:
        view = _list_view(status)
        page = await conversations_for(
            gateway,
            principal=user.principal,
            status=view,
            channel_id=inbox,
            search=q,
            before=_cursor(before),
        )
        inboxes = await views.inboxes_of(gateway, user)
    except WagateError as error:
        return error_page(request, error)
    template = "_conversation_list.html" if fragment else "conversations.html"
    next_at = page.next_before
    return render(
        request,
        template,
        tab=view.value if isinstance(view, ConversationStatus) else view,
        page=page,
        rows=[(views.ConversationItem(listed.row), listed) for listed in page.listed],
        inboxes=inboxes,
        inbox=inbox,
        q=q or "",
        before=before,
        fragment=fragment,
        next_cursor=f"{next_at[0].isoformat()}_{next_at[1]}" if next_at else None,
    )


async def _conversation_context(
    gateway: GatewayDep, user: SessionUser, conversation_id: int
) -> dict[str, Any]:
    row = await conversation_for(gateway, principal=user.principal, conversation_id=conversation_id)
    window = window_of(row.last_customer_message_at)
    return {
        "conversation": views.ConversationItem(row),
        "window": window,
        "window_words": views.window_words(window),
        "messages": await messages_of(gateway, row),
        "templates": await reply_templates_for(
            gateway, account_id=user.principal.account_id, channel_id=row.channel_id
        ),
    }


def _from_htmx(request: Request) -> bool:
    """A form the page posted itself (htmx): answered with the part that changed, not a redirect, so
    the page stays where it is (scroll, focus, what the agent is typing). Without JavaScript the same
    forms post and redirect."""
    return request.headers.get("hx-request") == "true"


@router.get("/conversations/{conversation_id}")
async def conversation(
    request: Request,
    gateway: GatewayDep,
    user: User,
    conversation_id: Annotated[int, views.PathId],
    part: str | None = None,
) -> HTMLResponse:
    """The page, or one of its live parts (`?part=messages|state`) that the page fetches again when
    the live stream says the conversation changed."""
    try:
        context = await _conversation_context(gateway, user, conversation_id)
    except WagateError as error:
        return error_page(request, error)
    template = {"messages": "_messages.html", "state": "_conversation_state.html"}.get(
        part or "", "conversation.html"
    )
    return render(request, template, notice=request.query_params.get("notice"), **context)


@router.post("/conversations/{conversation_id}/status")
async def set_conversation_status(
    request: Request, gateway: GatewayDep, user: User, conversation_id: Annotated[int, views.PathId]
) -> Response:
    form = await posted_form(request, user)
    try:
        await change_conversation_status(
            gateway,
            principal=user.principal,
            conversation_id=conversation_id,
            status=_status_tab(form.get("status")),
        )
    except WagateError as error:
        return error_page(request, error)
    if _from_htmx(request):
        try:
            context = await _conversation_context(gateway, user, conversation_id)
        except WagateError as error:
            return error_page(request, error)
        return render(request, "_conversation_state.html", **context)
    return RedirectResponse(f"/conversations/{conversation_id}", status_code=303)


async def _send_reply(
    gateway: GatewayDep,
    user: SessionUser,
    row: ConversationRow,
    *,
    text: str | None,
    template: dict[str, Any] | None,
) -> None:
    """An agent's reply through `accept_send`, so it is checked, costed, evented and paced exactly
    like `POST messages`."""
    # A reply keeps the conversation where the agent works on it (an API send would resolve it).
    keep = row.status.value if row.status is not ConversationStatus.resolved else None
    request_body = views.send_request(row, text=text, template=template, conversation_status=keep)
    await accept_send(gateway, principal=user.principal, request=request_body, idem=None)


async def _replied(
    request: Request, gateway: GatewayDep, user: SessionUser, conversation_id: int
) -> Response:
    """After a send: the thread with the new message in it (htmx), or the page again."""
    if not _from_htmx(request):
        return RedirectResponse(f"/conversations/{conversation_id}", status_code=303)
    try:
        context = await _conversation_context(gateway, user, conversation_id)
    except WagateError as error:
        return error_page(request, error)
    return render(request, "_messages.html", **context)


async def _reply_refused(
    request: Request,
    gateway: GatewayDep,
    user: SessionUser,
    conversation_id: int,
    refusal: WagateError,
    draft: str,
) -> Response:
    """The page with the refusal in words above the reply box and the draft kept (htmx takes just
    the words from it: `#reply-error`)."""
    try:
        context = await _conversation_context(gateway, user, conversation_id)
    except WagateError as error:  # the conversation itself is out of reach: that is the answer
        return error_page(request, error)
    return render(
        request,
        "conversation.html",
        status_code=refusal.status_code,
        reply_error=views.explain_refusal(refusal),
        draft=draft,
        **context,
    )


@router.post("/conversations/{conversation_id}/reply")
async def reply(
    request: Request, gateway: GatewayDep, user: User, conversation_id: Annotated[int, views.PathId]
) -> Response:
    """An agent's reply: free text, or a template when the window is closed."""
    form = await posted_form(request, user)
    try:
        row = await conversation_for(gateway, principal=user.principal, conversation_id=conversation_id)
        template: dict[str, Any] | None = None
        if "template" in form:  # the template picker's form: it starts with no template chosen
            if not form["template"]:
                raise InvalidRequest(
                    "Choose a template to send: with the window closed only a template can go."
                )
            name, _, language = form["template"].partition("|")
            values = {
                key.removeprefix("var:"): value for key, value in form.items() if key.startswith("var:")
            }
            parameters = form_parameters(values, list(values))
            template = {"name": name, "language": language, "parameters": parameters}
        await _send_reply(gateway, user, row, text=form.get("text") or None, template=template)
    except WagateError as error:
        return await _reply_refused(request, gateway, user, conversation_id, error, form.get("text", ""))
    return await _replied(request, gateway, user, conversation_id)


@router.post("/conversations/{conversation_id}/messages/{message_id}/retry")
async def retry_reply(
    request: Request,
    gateway: GatewayDep,
    user: User,
    conversation_id: Annotated[int, views.PathId],
    message_id: Annotated[str, Path(pattern=r"^[a-z]{3}_[0-9a-z]{1,36}$")],
) -> Response:
    """Retry of a failed reply: the same words again, as a new message, through the reply's own send."""
    await posted_form(request, user)
    try:
        row = await conversation_for(gateway, principal=user.principal, conversation_id=conversation_id)
        failed = await failed_reply(
            gateway.db, principal=user.principal, conversation_id=conversation_id, message_id=message_id
        )
        await _send_reply(gateway, user, row, text=failed.text, template=failed.template)
    except WagateError as error:
        return await _reply_refused(request, gateway, user, conversation_id, error, "")
    return await _replied(request, gateway, user, conversation_id)


@router.get("/live")
async def live(request: Request, gateway: GatewayDep, user: User) -> EventSourceResponse:
    """Server-sent events: every change of a conversation of the user's inboxes, as JSON
    `{conversation_id, kind, inbound, conversation_status, message_id}`; the page fetches again what
    it shows of that conversation. The browser's EventSource reconnects by itself. The session and
    the inboxes are checked again while it runs: a `signed_out` event ends it (live_stream.py)."""
    changes = await live_events(gateway, user, read_cookie(request, SESSION_COOKIE) or "")
    return EventSourceResponse(changes, ping=15, headers={"Cache-Control": "no-store"})
