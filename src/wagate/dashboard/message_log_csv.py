"""The message log as CSV (`/messages.csv`): every message the log's filters select, newest first,
streamed page by page."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse

from wagate.accounts.access import GatewayDep
from wagate.accounts.service import SessionUser
from wagate.core.db import isoformat
from wagate.core.errors import WagateError
from wagate.dashboard import views
from wagate.dashboard.message_log_form import LogFormQuery, channel_names
from wagate.dashboard.web import SECURITY_HEADERS, current_user, error_page
from wagate.messages.models import MessageStatus, SentMessage
from wagate.messages.pricing import message_cost_category
from wagate.messages.queries import list_messages
from wagate.messages.schemas import format_amount
from wagate.whatsapp.explanations import code_of

router = APIRouter(include_in_schema=False)
User = Annotated[SessionUser, Depends(current_user)]

# The CSV is streamed page after page of the same list (a read of its own for each, no transaction
# held open), and stops after CSV_MAX_ROWS: the page says so.
CSV_PAGE_SIZE = 200
CSV_MAX_ROWS = 100_000
CSV_COLUMNS = (
    "created_at",
    "message_id",
    "channel_id",
    "channel",
    "phone_number",
    "user_id",
    "status",
    "sent_by",
    "sent_as",
    "template",
    "template_language",
    "category",
    "text",
    "error_code",
    "external_error",
    "cost",
    "currency",
    "batch_id",
    "conversation_id",
)


def _cell(value: object) -> str:
    """A text cell a spreadsheet will not run as a formula (OWASP's CSV injection advice)."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def csv_line(sent: SentMessage, channels: dict[int, str]) -> str:
    message = sent.message
    failed = message.status is MessageStatus.failed
    code = code_of(message.external_error) if failed else None
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerow(
        (
            isoformat(message.created_at),
            message.id,
            message.channel_id,
            _cell(channels.get(message.channel_id, "")),
            message.phone_number or "",  # E.164, checked when sent
            message.user_id or "",
            message.status.value,
            views.sent_by(sent),
            message.sent_as.value if message.sent_as else "",
            message.template_name or "",
            message.template_language or "",
            message_cost_category(message) or "",
            _cell(message.text),
            "" if code is None else code,
            _cell(message.external_error) if failed else "",
            format_amount(0 if failed else message.cost_micros),
            message.cost_currency,
            message.batch_id or "",
            message.conversation_id,
        )
    )
    return out.getvalue()


@router.get("/messages.csv")
async def message_log_csv(
    request: Request,
    gateway: GatewayDep,
    user: User,
    form: LogFormQuery,
) -> Response:
    """Every message the filters select, newest first, up to CSV_MAX_ROWS, streamed page by page."""
    _, names = await channel_names(gateway, user)
    try:
        filters = form.filters()
        # The first page before the first byte: a refusal is a page, not a broken download.
        first = await list_messages(
            gateway.db, principal=user.principal, filters=filters, limit=CSV_PAGE_SIZE
        )
    except WagateError as error:
        return error_page(request, error)

    async def lines() -> AsyncIterator[str]:
        yield ",".join(CSV_COLUMNS) + "\r\n"
        page, written = first, 0
        while True:
            for sent in page.messages[: CSV_MAX_ROWS - written]:
                yield csv_line(sent, names)
            written += len(page.messages)
            if page.next_before is None or written >= CSV_MAX_ROWS:
                return
            page = await list_messages(
                gateway.db,
                principal=user.principal,
                filters=filters,
                before=page.next_before,
                limit=CSV_PAGE_SIZE,
            )

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%MZ")
    headers = {
        **SECURITY_HEADERS,
        "Content-Disposition": f'attachment; filename="messages-{stamp}.csv"',
    }
    return StreamingResponse(lines(), media_type="text/csv; charset=utf-8", headers=headers)
