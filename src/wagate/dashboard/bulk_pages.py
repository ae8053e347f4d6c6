"""Bulk sends in the dashboard (issue 12, point 3; issue 46, points 4 and 5): the batches with their
progress, a batch with its recipients, and a form that sends a batch from a pasted list or an uploaded
CSV, previewed first.

The inbox is a field of the form itself: the template list and the sender number follow it at once
(htmx swaps `bulk_inbox_part.html` on change), and without JavaScript the posted inbox is the one
used. The preview and the send go through the same service as `POST bulk_messages` (`prepare_batch`,
by way of `prepare_file_batch`, then `accept_batch`): every check, price and rejection is the API's
own, and the send re-checks everything the preview showed. Reading the file (its separator, its
lines, repeated numbers) is the bulk service's `read_recipients`; this module only renders.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import UploadFile

from wagate.accounts.service import SessionUser
from wagate.api.deps import GatewayDep
from wagate.bulk.models import PreparedBatch
from wagate.bulk.recipients_file import (
    BadLines,
    RecipientsFile,
    prepare_file_batch,
    read_recipients,
    rejection_in_words,
)
from wagate.bulk.schemas import MAX_RECIPIENTS, SendBulkRequest
from wagate.bulk.service import accept_batch, list_batches, read_batch
from wagate.channels.service import channel_for_member
from wagate.core.errors import ChannelNotFound, InvalidRequest, WagateError
from wagate.dashboard.views import (
    MEDIA_FILENAME_FIELD,
    Inbox,
    TemplateChoice,
    form_parameters,
    inboxes_of,
    templates_for,
)
from wagate.dashboard.web import (
    FormRefused,
    check_csrf,
    checked_fields,
    current_administrator,
    current_user,
    error_page,
    read_form,
    render,
)
from wagate.http.limits import parse_id
from wagate.messages.schemas import TemplateRef, format_amount
from wagate.templates.render import render_message_template
from wagate.templates.variables import MEDIA_HEADER

router = APIRouter(include_in_schema=False)
User = Annotated[SessionUser, Depends(current_user)]
Administrator = Annotated[SessionUser, Depends(current_administrator)]
RECIPIENTS_PAGE = 100
# A CSV of 1000 recipients with a few values each is far below this.
MAX_UPLOAD_BYTES = 1024 * 1024
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
        "bulk_list_rows.html" if fragment else "bulk_list.html",
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
        request, "bulk_inbox_part.html", inbox=chosen, templates=await templates_for(gateway, chosen.id)
    )


@router.post("/bulk/new")
async def form_again(request: Request, gateway: GatewayDep, user: Administrator) -> HTMLResponse:
    """The form for the posted inbox with what was typed: "Change the batch" from a preview, and the
    inbox's templates without JavaScript."""
    fields = await _bulk_form(request, user)
    return await _form(request, gateway, user, inbox=_inbox_of(fields) or None, fields=fields)


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
        recipients_text=_text_of(fields),
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


# The byte-order marks a CSV file may start with, and the encoding each names: Excel saves "CSV UTF-8"
# with the first and "Unicode text" as UTF-16 with the second.
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# The field that carries why an uploaded CSV could not be read, until the form's checks refuse it.
CSV_UNREADABLE = "csv_file_unreadable"


def unreadable_csv(issue: str) -> InvalidRequest:
    return InvalidRequest(
        f'The CSV file cannot be read: {issue}. Save it as "CSV UTF-8" (Excel: File > Save As > CSV'
        " UTF-8) and upload it again.",
        details=[{"field": "csv_file", "issue": issue}],
    )


def decode_csv(data: bytes) -> str:
    """An uploaded CSV's text: UTF-8, or the encoding its byte-order mark names. Anything else is
    refused naming the line (ValueError: why): Excel's usual "CSV" is Windows-1252, and read as UTF-8
    with replacements a name like Müller would go to every recipient as M\ufffdller; guessed, it
    could be any of a dozen encodings."""
    encoding, body = "utf-8", data
    for mark, named in _BYTE_ORDER_MARKS:
        if data.startswith(mark):
            encoding, body = named, data[len(mark) :]
            break
    try:
        return body.decode(encoding)
    except UnicodeDecodeError as exc:
        line = body[: exc.start].decode(encoding, errors="replace").count("\n") + 1
        raise ValueError(f"line {line} is not {encoding.upper()} text") from None


async def _bulk_form(request: Request, user: SessionUser) -> dict[str, Any]:
    """The fields of the bulk form (urlencoded, or multipart with the CSV file), CSRF checked."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await request.form(max_files=1, max_fields=200, max_part_size=MAX_UPLOAD_BYTES)
        fields: dict[str, Any] = {}
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                data = await value.read(MAX_UPLOAD_BYTES + 1)
                if len(data) > MAX_UPLOAD_BYTES:
                    raise FormRefused(f"the CSV file is larger than {MAX_UPLOAD_BYTES // 1024} KiB")
                if data:
                    try:
                        fields[name] = decode_csv(data)
                    except ValueError as exc:  # refused with the form's other checks
                        fields[CSV_UNREADABLE] = str(exc)
            else:
                fields[name] = value
        fields = checked_fields(fields)
    else:
        fields = dict(await read_form(request))
    check_csrf(fields.get("csrf_token"), user.csrf_token)
    return fields


def _inbox_of(fields: dict[str, Any]) -> int:
    """The chosen inbox's channel id; 0 (none chosen, refused as such) for anything that is no id."""
    return parse_id(str(fields.get("inbox") or "")) or 0


def _text_of(fields: dict[str, Any]) -> str:
    """The list: the uploaded file's text when there is one, else the box's."""
    return str(fields.get("csv_file") or fields.get("recipients") or "")


@dataclass(frozen=True)
class _Batch:
    """A form's batch as the service prepared it, with what the page says about it."""

    inbox: Inbox
    template: TemplateChoice
    prepared: PreparedBatch
    recipients: RecipientsFile
    shared: dict[str, str]

    def request(self) -> SendBulkRequest:
        return SendBulkRequest(
            channel_id=self.inbox.id,
            template=TemplateRef(name=self.template.name, language=self.template.language),
            recipients=self.recipients.recipients,
        )


class _Refused(Exception):
    def __init__(self, error: WagateError, recipients: RecipientsFile | None) -> None:
        self.error, self.recipients = error, recipients


async def _prepare(gateway: GatewayDep, user: SessionUser, fields: dict[str, Any]) -> _Batch:
    """The form's batch through the bulk service, every check of the API's included; _Refused says
    why not. The inbox is checked first, as the API checks `channel_id`: the refusals name the
    template's variables, which must not tell anyone about another account's (or inbox's) templates."""
    recipients: RecipientsFile | None = None
    try:
        inbox_id = _inbox_of(fields)
        if not inbox_id:
            raise InvalidRequest("Choose an inbox.", details=[{"issue": "no inbox"}])
        async with gateway.db.read() as session:
            await channel_for_member(session, principal=user.principal, channel_id=inbox_id)
        inbox = next((i for i in await inboxes_of(gateway, user) if i.id == inbox_id), None)
        if inbox is None:  # the check above refuses first; this keeps a change of it from being a 500
            raise ChannelNotFound("You are not a member of this inbox.")
        choices = {t.value: t for t in await templates_for(gateway, inbox_id)}
        template = choices.get(str(fields.get("template") or ""))
        if template is None:
            name = (
                str(fields.get("template") or "").replace("|", " (") + ")" if fields.get("template") else ""
            )
            raise InvalidRequest(
                f"Choose one of the templates of {inbox.name} ({inbox.phone_number})"
                + (f": {name} is not one of its approved templates." if name else "."),
                details=[{"issue": "template not of the inbox"}],
            )
        if fields.get(CSV_UNREADABLE):
            raise unreadable_csv(str(fields[CSV_UNREADABLE]))
        variables = template.variables
        known = [*variables, MEDIA_FILENAME_FIELD] if MEDIA_HEADER in variables else variables
        # Only the chosen template's values: without JavaScript another template's may be posted too.
        shared = {
            name: str(fields[f"var:{name}"]) for name in known if str(fields.get(f"var:{name}") or "").strip()
        }
        recipients = read_recipients(
            _text_of(fields),
            variables=variables,
            columns_known=known,
            shared=shared,
            parameters=lambda values: form_parameters(values, variables),
        )
        prepared, recipients = await prepare_file_batch(
            gateway.lookups,
            principal=user.principal,
            channel_id=inbox.id,
            template=TemplateRef(name=template.name, language=template.language),
            recipients=recipients,
            skip_bad=bool(fields.get("skip_bad")),
            settings=gateway.settings,
            secret_box=gateway.secret_box,
        )
    except WagateError as error:
        raise _Refused(error, recipients) from None
    return _Batch(inbox, template, prepared, recipients, shared)


async def _refused(
    request: Request, gateway: GatewayDep, user: SessionUser, fields: dict[str, Any], refused: _Refused
) -> HTMLResponse:
    return await _form(
        request,
        gateway,
        user,
        inbox=_inbox_of(fields) or None,
        status_code=refused.error.status_code,
        error=refused.error,
        recipients=refused.recipients,
        fields=fields,
    )


@router.post("/bulk/preview")
async def preview(request: Request, gateway: GatewayDep, user: Administrator) -> Response:
    """Every check of a real batch, nothing stored: from which inbox and number, which template, how
    many messages, the cost, the first message, and every line left out or rejected."""
    fields = await _bulk_form(request, user)
    try:
        batch = await _prepare(gateway, user, fields)
    except _Refused as refused:
        return await _refused(request, gateway, user, fields, refused)
    prepared, recipients = batch.prepared, batch.recipients
    first = prepared.sends[0] if prepared.sends else None
    rendered = None
    if first is not None and first.template is not None:
        template = first.template.template
        shown = render_message_template(template.components, template.variables, first.template.parameters)
        rendered = "\n".join(p for p in (shown.header, shown.body, shown.footer) if p) if shown else None
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
        recipients_text=_text_of(fields),
        rejected=rejected,
    )


def _carried(fields: dict[str, Any], batch: _Batch) -> dict[str, str]:
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
    fields = await _bulk_form(request, user)
    expected = parse_id(str(fields.get("expected_sends") or ""))
    try:
        batch = await _prepare(gateway, user, fields)
        if not batch.prepared.sends:  # the preview offers no Send then; a post on its own is refused too
            raise _Refused(
                InvalidRequest("No message would be sent: every recipient is rejected.", details=[]),
                batch.recipients,
            )
        try:
            accepted = await accept_batch(
                gateway, principal=user.principal, request=batch.request(), idem=None, expected_sends=expected
            )
        except WagateError as error:
            raise _Refused(error, batch.recipients) from None
    except _Refused as refused:
        return await _refused(request, gateway, user, fields, refused)
    return RedirectResponse(f"/bulk/{accepted['batch_id']}", status_code=303)


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
        "bulk_batch_state.html" if fragment else "bulk_batch.html",
        report=report,
        recipients=shown,
        page=page,
        pages=max(1, -(-len(report.recipients) // RECIPIENTS_PAGE)),
        inbox=inboxes.get(report.batch.channel_id),
        rejection_in_words=rejection_in_words,
    )


__all__ = ["router"]
