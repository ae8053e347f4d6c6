"""Bulk sends in the dashboard (issue 12, point 3): the batches with their progress, a batch with its
recipients, and a form that sends a batch from a pasted list or an uploaded CSV, previewed first.

The preview and the send go through the same service as `POST bulk_messages` (`prepare_batch`, then
`accept_batch`): every check, price and rejection is the API's own.
"""

from __future__ import annotations

import codecs
import csv
import io
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from wagate.accounts.service import SessionUser
from wagate.bulk.schemas import MAX_RECIPIENTS, BulkRecipient, SendBulkRequest
from wagate.bulk.service import accept_batch, list_batches, prepare_batch, read_batch
from wagate.channels.service import channel_for_member
from wagate.dashboard.views import MEDIA_FILENAME_FIELD, Inbox, form_parameters, inboxes_of, templates_for
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
from wagate.deps import GatewayDep
from wagate.errors import InvalidRequest, WagateError
from wagate.limits import parse_id
from wagate.messages.schemas import TemplateRef, format_amount
from wagate.templates.render import render_message_template
from wagate.templates.variables import MEDIA_HEADER

router = APIRouter(include_in_schema=False)
User = Annotated[SessionUser, Depends(current_user)]
Administrator = Annotated[SessionUser, Depends(current_administrator)]
RECIPIENTS_PAGE = 100
# A CSV of 1000 recipients with a few values each is far below this.
MAX_UPLOAD_BYTES = 1024 * 1024


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
    request: Request, gateway: GatewayDep, user: Administrator, inbox: int | None = None
) -> HTMLResponse:
    return await _form(request, gateway, user, inbox=inbox)


async def _form(
    request: Request,
    gateway: GatewayDep,
    user: SessionUser,
    *,
    inbox: int | None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    inboxes = await inboxes_of(gateway, user)
    chosen: Inbox | None = next((i for i in inboxes if i.id == inbox), inboxes[0] if inboxes else None)
    choices = await templates_for(gateway, chosen.id) if chosen else []
    return render(
        request,
        "bulk_new.html",
        status_code=status_code,
        inboxes=inboxes,
        inbox=chosen,
        templates=choices,
        max_recipients=MAX_RECIPIENTS,
        **context,
    )


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


def recipients_of(text: str, variables: list[str], shared: dict[str, str]) -> list[BulkRecipient]:
    """The recipients a form gives: a CSV with a header (`phone_number`, then one column per template
    variable), or one number per line that all take the values typed in the form."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        raise InvalidRequest(
            "Give at least one phone number.", details=[{"field": "recipients", "issue": "empty"}]
        )
    header = [cell.strip() for cell in next(csv.reader([lines[0]]))]
    if header and header[0].lower() == "phone_number":
        columns = header[1:]
        known = [*variables, MEDIA_FILENAME_FIELD] if MEDIA_HEADER in variables else variables
        unknown = [c for c in columns if c not in known]
        if unknown:
            raise InvalidRequest(
                f"The CSV has columns the template does not take: {', '.join(unknown)}"
                f" (its variables: {', '.join(variables) or 'none'}).",
                details=[{"field": "recipients", "issue": "unknown columns"}],
            )
        recipients = []
        for row in csv.reader(io.StringIO("\n".join(lines[1:]))):
            if not row or not row[0].strip():
                continue
            values = {**shared, **{c: v.strip() for c, v in zip(columns, row[1:], strict=False)}}
            recipients.append(
                BulkRecipient(
                    phone_number=row[0].strip(),
                    parameters=form_parameters(values, variables) if variables else None,
                )
            )
        return recipients
    return [
        BulkRecipient(
            phone_number=line.strip().split(",")[0].strip(),
            parameters=form_parameters(shared, variables) if variables else None,
        )
        for line in lines
    ]


def _inbox_of(fields: dict[str, Any]) -> int:
    """The chosen inbox's channel id; 0 (none chosen, refused as such) for anything that is no id."""
    return parse_id(str(fields.get("inbox") or "")) or 0


def _request_of(fields: dict[str, Any], variables: list[str]) -> SendBulkRequest:
    if fields.get(CSV_UNREADABLE):
        raise unreadable_csv(str(fields[CSV_UNREADABLE]))
    name, _, language = str(fields.get("template", "")).partition("|")
    shared = {k.removeprefix("var:"): str(v) for k, v in fields.items() if k.startswith("var:") and v}
    text = str(fields.get("csv_file") or fields.get("recipients") or "")
    try:
        return SendBulkRequest(
            channel_id=_inbox_of(fields),
            template=TemplateRef(name=name, language=language),
            recipients=recipients_of(text, variables, shared),
        )
    except (ValidationError, ValueError) as exc:
        raise InvalidRequest(f"The form is not complete: {exc}") from None


async def _bulk_request(gateway: GatewayDep, user: SessionUser, fields: dict[str, Any]) -> SendBulkRequest:
    """The form as the API's request body, its CSV columns checked against the chosen template.

    The inbox is checked first, as the API checks `channel_id`: the columns' refusal names the
    template's variables, which must not tell anyone about another account's (or inbox's) templates."""
    inbox = _inbox_of(fields)
    if inbox:
        async with gateway.db.read() as session:
            await channel_for_member(session, principal=user.principal, channel_id=inbox)
    choices = {t.value: t for t in await templates_for(gateway, inbox)} if inbox else {}
    chosen = choices.get(str(fields.get("template")))
    return _request_of(fields, chosen.variables if chosen else [])


@router.post("/bulk/preview")
async def preview(request: Request, gateway: GatewayDep, user: Administrator) -> Response:
    """Every check of a real batch, nothing stored: the count, the cost and the first message."""
    fields = await _bulk_form(request, user)
    inbox = _inbox_of(fields)
    try:
        body = await _bulk_request(gateway, user, fields)
        batch = await prepare_batch(
            gateway.lookups,
            principal=user.principal,
            request=body,
            settings=gateway.settings,
            secret_box=gateway.secret_box,
        )
    except WagateError as error:
        return await _form(
            request,
            gateway,
            user,
            inbox=inbox or None,
            status_code=error.status_code,
            error=error,
            fields=fields,
        )
    first = batch.sends[0] if batch.sends else None
    rendered = None
    if first is not None and first.template is not None:
        template = first.template.template
        shown = render_message_template(template.components, template.variables, first.template.parameters)
        rendered = "\n".join(p for p in (shown.header, shown.body, shown.footer) if p) if shown else None
    return render(
        request,
        "bulk_preview.html",
        batch=batch,
        first=first,
        rendered=rendered,
        cost=format_amount(sum(send.cost_micros for send in batch.sends)),
        currency=gateway.settings.currency,
        fields={k: v for k, v in fields.items() if k != "csv_file"},
        recipients_text=str(fields.get("csv_file") or fields.get("recipients") or ""),
        rejected=[r for r in batch.recipients if r[2] is not None],
    )


@router.post("/bulk")
async def send_batch(request: Request, gateway: GatewayDep, user: Administrator) -> Response:
    fields = await _bulk_form(request, user)
    inbox = _inbox_of(fields)
    try:
        body = await _bulk_request(gateway, user, fields)
        accepted = await accept_batch(gateway, principal=user.principal, request=body, idem=None)
    except WagateError as error:
        return await _form(
            request,
            gateway,
            user,
            inbox=inbox or None,
            status_code=error.status_code,
            error=error,
            fields=fields,
        )
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
    )


__all__ = ["router"]
