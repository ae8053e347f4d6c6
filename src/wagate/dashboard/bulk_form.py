"""The bulk form's batch (`bulk_pages`): the posted fields, urlencoded or multipart with an uploaded
CSV (decoded here, refused with the form's other checks when it cannot be read), and the batch they
make, prepared through the same bulk service as `POST bulk_messages` with every check of the API's.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.datastructures import UploadFile

from wagate.accounts.access import GatewayDep
from wagate.accounts.service import SessionUser
from wagate.bulk.models import PreparedBatch
from wagate.bulk.recipients_file import RecipientsFile, prepare_file_batch, read_recipients
from wagate.bulk.schemas import SendBulkRequest
from wagate.channels.service import channel_for_member
from wagate.core.errors import ChannelNotFound, InvalidRequest, WagateError
from wagate.dashboard.template_picker import (
    MEDIA_FILENAME_FIELD,
    TemplateChoice,
    form_parameters,
    templates_for,
)
from wagate.dashboard.views import Inbox, inboxes_of
from wagate.dashboard.web import FormRefused, check_csrf, checked_fields, read_form
from wagate.http.limits import parse_id
from wagate.messages.schemas import TemplateRef
from wagate.templates.variables import MEDIA_HEADER

# A CSV of 1000 recipients with a few values each is far below this.
MAX_UPLOAD_BYTES = 1024 * 1024

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


async def bulk_form_fields(request: Request, user: SessionUser) -> dict[str, Any]:
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


def inbox_of(fields: dict[str, Any]) -> int:
    """The chosen inbox's channel id; 0 (none chosen, refused as such) for anything that is no id."""
    return parse_id(str(fields.get("inbox") or "")) or 0


def list_text(fields: dict[str, Any]) -> str:
    """The list: the uploaded file's text when there is one, else the box's."""
    return str(fields.get("csv_file") or fields.get("recipients") or "")


@dataclass(frozen=True)
class FormBatch:
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


class BatchRefused(Exception):
    def __init__(self, error: WagateError, recipients: RecipientsFile | None) -> None:
        self.error, self.recipients = error, recipients


async def prepare_form_batch(gateway: GatewayDep, user: SessionUser, fields: dict[str, Any]) -> FormBatch:
    """The form's batch through the bulk service, every check of the API's included; BatchRefused says
    why not. The inbox is checked first, as the API checks `channel_id`: the refusals name the
    template's variables, which must not tell anyone about another account's (or inbox's) templates."""
    recipients: RecipientsFile | None = None
    try:
        inbox_id = inbox_of(fields)
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
            list_text(fields),
            variables=variables,
            columns_known=known,
            shared=shared,
            parameters=lambda values: form_parameters(values, variables),
        )
        prepared, recipients = await prepare_file_batch(
            gateway.caches,
            principal=user.principal,
            channel_id=inbox.id,
            template=TemplateRef(name=template.name, language=template.language),
            recipients=recipients,
            skip_bad=bool(fields.get("skip_bad")),
            settings=gateway.settings,
            secret_box=gateway.secret_box,
        )
    except WagateError as error:
        raise BatchRefused(error, recipients) from None
    return FormBatch(inbox, template, prepared, recipients, shared)
