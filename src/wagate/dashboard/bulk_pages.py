"""Bulk sends in the dashboard (issue 12, point 3; issue 46, points 4 and 5): the batches with their
progress, a batch with its recipients, and a form that sends a batch from a pasted list or an uploaded
CSV, previewed first.

The inbox is a field of the form itself: the template list and the sender number follow it at once
(htmx swaps `_bulk_inbox_part.html` on change), and without JavaScript the posted inbox is the one
used. The preview and the send go through the same service as `POST bulk_messages` (`prepare_batch`,
by way of `prepare_file_batch`, then `accept_batch`): every check, price and rejection is the API's
own, and the send re-checks everything the preview showed. Reading the file (its separator, its
lines, repeated numbers) is the bulk service's `read_recipients`; the posted fields and the batch they
make are `bulk_form`; this module only renders.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from wagate.accounts.access import GatewayDep
from wagate.accounts.service import SessionUser
from wagate.bulk.recipients_file import BadLines, RecipientsFile, rejection_in_words
from wagate.bulk.schemas import MAX_RECIPIENTS
from wagate.bulk.service import accept_batch, list_batches, read_batch
from wagate.core.errors import ChannelNotFound, InvalidRequest, WagateError
from wagate.dashboard.bulk_form import (
    BatchRefused,
    FormBatch,
    bulk_form_fields,
    inbox_of,
    list_text,
    prepare_form_batch,
)
from wagate.dashboard.template_picker import templates_for
from wagate.dashboard.views import Inbox, inboxes_of
from wagate.dashboard.web import current_administrator, current_user, error_page, render
from wagate.http.limits import parse_id
from wagate.messages.schemas import format_amount
from wagate.templates.render import message_template_text

router = APIRouter(include_in_schema=False)
User = Annotated[SessionUser, Depends(current_user)]
Administrator = Annotated[SessionUser, Depends(current_administrator)]
RECIPIENTS_PAGE = 100
# The problems of a refused list a page names one by one; the rest are counted.
PROBLEMS_SHOWN = 20


@router.get("/bulk")
async def batches(
    request: Request, gateway: GatewayDep, user: User, before: str | None = None
) -> HTMLResponse:
    try:
        summaries, next_before = await list_batches(gateway, principal=user.principal, before=before)
    except WagateError as error:  # an agent: bulk batches are for administrators (API.md section 6)
        return error_page(request, error)
    inboxes = {inbox.id: inbox for inbox in await inboxes_of(gateway, user)}
    fragment = request.query_params.get("fragment") == "1"
    return render(
        request,
        "_bulk_list_rows.html" if fragment else "bulk_list.html",
        summaries=summaries,
        next_before=next_before,
        inboxes=inboxes,
        before=before,
    )


@router.get("/bulk/new")
async def new_batch(
    request: Request, gateway: GatewayDep, user: Administrator, inbox: str | None = None
) -> HTMLResponse:
    return await _form(request, gateway, user, inbox=parse_id(inbox or "") or None)


@router.get("/bulk/new/inbox")
async def inbox_part(
    request: Request, gateway: GatewayDep, user: Administrator, inbox: str | None = None
) -> HTMLResponse:
    """The part of the form that depends on the inbox (its sender number, its WABA's templates),
    swapped in when the inbox select changes."""
    inboxes = await inboxes_of(gateway, user)
    chosen = next((i for i in inboxes if i.id == parse_id(inbox or "")), None)
    if chosen is None:
        return error_page(request, ChannelNotFound("You are not a member of this inbox."))
    return render(
        request, "_bulk_inbox_part.html", inbox=chosen, templates=await templates_for(gateway, chosen.id)
    )


@router.post("/bulk/new")
async def form_again(request: Request, gateway: GatewayDep, user: Administrator) -> HTMLResponse:
    """The form for the posted inbox with what was typed: "Change the batch" from a preview, and the
    inbox's templates without JavaScript."""
    fields = await bulk_form_fields(request, user)
    return await _form(request, gateway, user, inbox=inbox_of(fields) or None, fields=fields)


async def _form(
    request: Request,
    gateway: GatewayDep,
    user: SessionUser,
    *,
    inbox: int | None,
    status_code: int = 200,
    error: WagateError | None = None,
    recipients: RecipientsFile | None = None,
    fields: dict[str, Any] | None = None,
) -> HTMLResponse:
    inboxes = await inboxes_of(gateway, user)
    if inbox is not None and all(i.id != inbox for i in inboxes):
        # Another account's inbox, or one the user left: refused as the inbox part refuses it.
        return error_page(request, ChannelNotFound("You are not a member of this inbox."))
    chosen: Inbox | None = next((i for i in inboxes if i.id == inbox), inboxes[0] if inboxes else None)
    choices = await templates_for(gateway, chosen.id) if chosen else []
    fields = fields or {}
    return render(
        request,
        "bulk_new.html",
        status_code=status_code,
        inboxes=inboxes,
        inbox=chosen,
        templates=choices,
        max_recipients=MAX_RECIPIENTS,
        error=error,
        problems=_problems(error, recipients),
        fields=fields,
        # An uploaded file's text comes back in the box, to correct a line and preview again.
        recipients_text=list_text(fields),
    )


def _problems(error: WagateError | None, recipients: RecipientsFile | None) -> list[str]:
    """An error's problems in words, by line of the list: never the API's field names."""
    if isinstance(error, BadLines):
        said = error.lines
    elif error is not None and recipients is not None:
        said = recipients.in_words(error)
    else:
        return []
    if len(said) > PROBLEMS_SHOWN:
        return [*said[:PROBLEMS_SHOWN], f"and {len(said) - PROBLEMS_SHOWN} more"]
    return said


async def _refused(
    request: Request, gateway: GatewayDep, user: SessionUser, fields: dict[str, Any], refused: BatchRefused
) -> HTMLResponse:
    return await _form(
        request,
        gateway,
        user,
        inbox=inbox_of(fields) or None,
        status_code=refused.error.status_code,
        error=refused.error,
        recipients=refused.recipients,
        fields=fields,
    )


@router.post("/bulk/preview")
async def preview(request: Request, gateway: GatewayDep, user: Administrator) -> Response:
    """Every check of a real batch, nothing stored: from which inbox and number, which template, how
    many messages, the cost, the first message, and every line left out or rejected."""
    fields = await bulk_form_fields(request, user)
    try:
        batch = await prepare_form_batch(gateway, user, fields)
    except BatchRefused as refused:
        return await _refused(request, gateway, user, fields, refused)
    prepared, recipients = batch.prepared, batch.recipients
    first = prepared.sends[0] if prepared.sends else None
    rendered = None
    if first is not None and first.template is not None:
        template = first.template.template
        rendered = message_template_text(template.components, template.variables, first.template.parameters)
    rejected = [
        (recipients.line_of(number), number, rejection_in_words(why))
        for number, _, why in prepared.recipients
        if why is not None
    ]
    return render(
        request,
        "bulk_preview.html",
        batch=batch,
        sends=len(prepared.sends),
        first=first,
        rendered=rendered,
        cost=format_amount(sum(send.cost_micros for send in prepared.sends)),
        currency=gateway.settings.currency,
        carried=_carried(fields, batch),
        recipients_text=list_text(fields),
        rejected=rejected,
    )


def _carried(fields: dict[str, Any], batch: FormBatch) -> dict[str, str]:
    """What the preview's form posts back for the send (the list goes in a textarea of its own)."""
    carried = {
        "inbox": str(batch.inbox.id),
        "template": batch.template.value,
        **{f"var:{name}": value for name, value in batch.shared.items()},
        "expected_sends": str(len(batch.prepared.sends)),
    }
    if fields.get("skip_bad"):
        carried["skip_bad"] = "1"
    return carried


@router.post("/bulk")
async def send_batch(request: Request, gateway: GatewayDep, user: Administrator) -> Response:
    """The batch as previewed: read and checked again (a preview is not trusted), and refused when
    it would now send another number of messages than the preview showed."""
    fields = await bulk_form_fields(request, user)
    expected = parse_id(str(fields.get("expected_sends") or ""))
    try:
        batch = await prepare_form_batch(gateway, user, fields)
        if not batch.prepared.sends:  # the preview offers no Send then; a post on its own is refused too
            raise BatchRefused(
                InvalidRequest("No message would be sent: every recipient is rejected.", details=[]),
                batch.recipients,
            )
        try:
            accepted = await accept_batch(
                gateway, principal=user.principal, request=batch.request(), idem=None, expected_sends=expected
            )
        except WagateError as error:
            raise BatchRefused(error, batch.recipients) from None
    except BatchRefused as refused:
        return await _refused(request, gateway, user, fields, refused)
    return RedirectResponse(f"/bulk/{accepted.batch_id}", status_code=303)


@router.get("/bulk/{batch_id}")
async def batch_page(
    request: Request,
    gateway: GatewayDep,
    user: User,
    batch_id: Annotated[str, Path(max_length=40)],
    page: int = 1,
) -> HTMLResponse:
    try:
        async with gateway.db.read() as session:
            report = await read_batch(session, principal=user.principal, batch_id=batch_id)
    except WagateError as error:
        return error_page(request, error)
    page = max(1, page)
    start = (page - 1) * RECIPIENTS_PAGE
    shown = report.recipients[start : start + RECIPIENTS_PAGE]
    inboxes = {inbox.id: inbox for inbox in await inboxes_of(gateway, user)}
    fragment = request.query_params.get("fragment") == "1"
    return render(
        request,
        "_bulk_batch_state.html" if fragment else "bulk_batch.html",
        report=report,
        recipients=shown,
        page=page,
        pages=max(1, -(-len(report.recipients) // RECIPIENTS_PAGE)),
        inbox=inboxes.get(report.batch.channel_id),
        rejection_in_words=rejection_in_words,
    )


__all__ = ["router"]
