"""The message log (issue 12, point 4): `/messages`, every message sent through the API, in bulk batches
and by agents on the user's inboxes, filtered, paged, downloadable as CSV, with a chart of failures by
error code over time.

The list is `messages.queries.list_messages`, the function behind `GET /v1/.../whatsapp/messages`; the
chart's counts are `messages.queries.failures_over_time`. What is here only reads the form and draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from wagate.accounts.access import GatewayDep
from wagate.accounts.service import SessionUser
from wagate.core.errors import WagateError
from wagate.dashboard import views
from wagate.dashboard.charts import FAILURES_NARROW, FAILURES_WIDE, failure_chart
from wagate.dashboard.message_log_csv import CSV_MAX_ROWS
from wagate.dashboard.message_log_form import STATUSES, LogFormQuery, channel_names, refusal_text
from wagate.dashboard.web import current_user, error_page, render
from wagate.messages.models import MessageStatus, SentMessage
from wagate.messages.queries import failures_over_time, list_messages
from wagate.messages.schemas import format_amount

router = APIRouter(include_in_schema=False)
User = Annotated[SessionUser, Depends(current_user)]

PAGE_SIZE = 50


@dataclass(frozen=True)
class LogRow:
    """A sent message as a row of the log."""

    id: str
    created_at: datetime
    channel: str
    recipient: str
    status: str
    sent_by: str
    template: str | None  # "otp_code", its language in `language`; else the text in `content`
    language: str | None
    content: str
    error: str | None  # as stored (Meta's own title), for the cell's tooltip
    error_name: views.FailureName | None  # what every page calls it
    cost: str
    conversation_id: int
    conversation_status: str
    batch_id: str | None
    held: str | None = None  # Meta holds it for a quality check (views.held_note)


def log_row(sent: SentMessage, channels: dict[int, str]) -> LogRow:
    message = sent.message
    failed = message.status is MessageStatus.failed
    error = message.external_error if failed else None
    text = message.text or ""
    content = text if len(text) <= 80 else text[:79] + "…"
    return LogRow(
        id=message.id,
        created_at=message.created_at,
        channel=channels.get(message.channel_id, str(message.channel_id)),
        recipient=message.phone_number or message.user_id or "?",
        status=message.status.value,
        sent_by=views.sent_by(sent),
        template=message.template_name,
        language=message.template_language,
        content=content,
        error=error,
        error_name=views.failure_name(error),
        cost=f"{format_amount(0 if failed else message.cost_micros)} {message.cost_currency}",
        conversation_id=message.conversation_id,
        conversation_status=sent.conversation_status.value,
        batch_id=message.batch_id,
        held=views.held_note(message.upstream_status),
    )


@router.get("/messages")
async def message_log(
    request: Request,
    gateway: GatewayDep,
    user: User,
    form: LogFormQuery,
    before: Annotated[str | None, Query(max_length=40)] = None,
) -> HTMLResponse:
    inboxes, names = await channel_names(gateway, user)
    context: dict[str, Any] = {
        "form": form,
        "inboxes": inboxes,
        "statuses": STATUSES,
        "csv_max_rows": CSV_MAX_ROWS,
    }
    try:
        filters = form.filters()
        page = await list_messages(
            gateway.db, principal=user.principal, filters=filters, before=before or None, limit=PAGE_SIZE
        )
        failures = await failures_over_time(gateway.db, principal=user.principal, filters=filters)
    except WagateError as error:
        if error.status_code != 422:
            return error_page(request, error)
        return render(
            request,
            "message_log.html",
            status_code=422,
            error=refusal_text(error),
            rows=[],
            chart=None,
            **context,
        )
    rows = [log_row(sent, names) for sent in page.messages]
    chart = failure_chart(failures, FAILURES_WIDE)
    return render(
        request,
        "message_log.html",
        rows=rows,
        chart=chart,
        charts=[chart, failure_chart(failures, FAILURES_NARROW)],
        older=f"/messages?{form.query(before=page.next_before)}" if page.next_before else None,
        newest=f"/messages?{form.query()}" if before else None,
        csv_url=f"/messages.csv?{form.query()}" if form.filtered else "/messages.csv",
        **context,
    )
