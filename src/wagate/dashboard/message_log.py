"""The message log (issue 12, point 4): `/messages`, every message sent through the API, in bulk batches
and by agents on the user's inboxes, filtered, paged, downloadable as CSV, with a chart of failures by
error code over time.

The list is `messages.service.list_messages`, the function behind `GET /v1/.../whatsapp/messages`; the
chart's counts are `messages.service.failures_over_time`. What is here only reads the form and draws.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from wagate.accounts.service import SessionUser
from wagate.api.deps import Gateway, GatewayDep
from wagate.core.db import isoformat
from wagate.core.errors import InvalidRequest, WagateError
from wagate.dashboard import views
from wagate.dashboard.web import SECURITY_HEADERS, current_user, error_page, render
from wagate.http.limits import parse_id
from wagate.messages.models import MessageStatus, SentMessage
from wagate.messages.pricing import message_cost_category
from wagate.messages.schemas import format_amount
from wagate.messages.service import FailureSeries, MessageFilters, failures_over_time, list_messages
from wagate.whatsapp.explanations import code_of

router = APIRouter(include_in_schema=False)
User = Annotated[SessionUser, Depends(current_user)]
Text = Annotated[str | None, Query(max_length=100)]

PAGE_SIZE = 50
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
# The service names fields as the API does; the page's labels are these.
FIELD_LABELS = {
    "created_after": "From",
    "created_before": "To",
    "channel_id": "Channel",
    "phone_number": "Number",
    "status": "Status",
    "template_name": "Template",
    "error_code": "Error code",
    "before": "Older",
}
STATUSES = [(s.value, s.value.capitalize()) for s in MessageStatus]


@dataclass(frozen=True)
class LogForm:
    """The filters as the form holds them (to fill it again and to carry them to other pages)."""

    date_from: str = ""
    date_to: str = ""
    channel: str = ""
    status: str = ""
    number: str = ""
    template: str = ""
    error_code: str = ""

    def query(self, **extra: str) -> str:
        pairs = {
            "from": self.date_from,
            "to": self.date_to,
            "channel": self.channel,
            "status": self.status,
            "number": self.number,
            "template": self.template,
            "error_code": self.error_code,
            **extra,
        }
        return urlencode({k: v for k, v in pairs.items() if v})

    @property
    def filtered(self) -> bool:
        return bool(self.query())

    def filters(self) -> MessageFilters:
        """The service's filters: the dates are whole UTC days, `to` included."""
        after = _day(self.date_from, "created_after")
        to = _day(self.date_to, "created_before")
        before = None
        if to is not None:
            try:
                before = to + timedelta(days=1)
            except OverflowError:
                before = None  # the last day there is: no end
        channel_id = None
        if self.channel:
            channel_id = parse_id(self.channel)
            if channel_id is None:
                raise _invalid("channel_id", "not a channel of yours")
        return MessageFilters(
            channel_id=channel_id,
            phone_number=self.number or None,
            status=self.status or None,
            template_name=self.template or None,
            error_code=self.error_code or None,
            created_after=after,
            created_before=before,
        )


def _invalid(field: str, issue: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {issue}", details=[{"field": field, "issue": issue}])


def _day(value: str, field: str) -> datetime | None:
    if not value:
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise _invalid(field, "must be a date, YYYY-MM-DD") from None
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def refusal_text(error: WagateError) -> str:
    """A refusal of the filters in the form's words ("Number: not a valid phone number")."""
    details = error.details or []
    if not details:
        return error.message
    return "; ".join(
        f"{views.field_words(str(d.get('field')), FIELD_LABELS)}: {d.get('issue')}" for d in details
    )


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


def sent_by(sent: SentMessage) -> str:
    message = sent.message
    return "Agent" if message.agent_user_id is not None else "Bulk" if message.batch_id else "API"


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
        sent_by=sent_by(sent),
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


# --- the chart: failures per hour or day, stacked by reason; SVG drawn here, no library ---------------

CHART_WIDTH, CHART_HEIGHT = 720, 240
# The phone's drawing (CSS shows one of the two): half as wide, so that its 12-unit text stays about
# 11 px on a 390 px screen instead of shrinking to 5, with fewer bars and day labels.
NARROW_WIDTH = 360
NARROW_LABELS, WIDE_LABELS = 3, 8
NARROW_BARS = 31
PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM = 44, 12, 14, 206
MAX_BARS = 62
SERIES = 5  # the most frequent reasons get a colour each; the rest are "Other"


@dataclass(frozen=True)
class Segment:
    series: int
    y: float
    height: float
    title: str


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    segments: list[Segment]


@dataclass(frozen=True)
class Tick:
    y: float
    label: str


@dataclass(frozen=True)
class AxisLabel:
    x: float
    label: str


@dataclass(frozen=True)
class LegendItem:
    series: int
    reason: str
    title: str
    count: int


@dataclass(frozen=True)
class Chart:
    size: str  # "wide" or "narrow"
    width: int
    height: int
    left: int
    right: int
    bottom: int
    bars: list[Bar]
    ticks: list[Tick]
    labels: list[AxisLabel]
    legend: list[LegendItem]
    total: int
    start: datetime
    end: datetime
    per: str  # "hour", "day" or "N days"
    description: str


def reason_title(reason: str) -> str:
    """`131026` -> `131026 Message undeliverable`, as the rows and the thread name it; our own
    reasons (`expired`) in words."""
    return str(views.failure_name(reason) or reason)


def _nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5 times a power of ten at or above `value` (at least 1)."""
    if value <= 1:
        return 1
    power: int = 10 ** (len(str(value)) - 1)
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def _bucket_label(bucket: str, hourly: bool) -> str:
    if hourly:
        day, _, hour = bucket.partition(" ")
        return f"{day[5:]} {hour}:00"
    return bucket[5:]  # MM-DD


def failure_chart(series: FailureSeries, *, narrow: bool = False) -> Chart:
    """The chart drawn for a screen (`narrow=False`, 720 units wide) or for a phone."""
    width = NARROW_WIDTH if narrow else CHART_WIDTH
    totals = {reason: sum(per.values()) for reason, per in series.counts.items()}
    ranked = sorted(totals, key=lambda r: (-totals[r], r))
    legend = [LegendItem(i, r, reason_title(r), totals[r]) for i, r in enumerate(ranked[:SERIES])]
    if len(ranked) > SERIES:
        legend.append(LegendItem(SERIES, "other", "Other", sum(totals[r] for r in ranked[SERIES:])))
    series_of = {r: min(i, SERIES) for i, r in enumerate(ranked)}
    # Long ranges: neighbouring days share a bar, so that bars stay wide enough to see.
    group = max(1, math.ceil(len(series.buckets) / (NARROW_BARS if narrow else MAX_BARS)))
    groups = [series.buckets[i : i + group] for i in range(0, len(series.buckets), group)]
    stacks: list[list[int]] = []
    for buckets in groups:
        stack = [0] * (SERIES + 1)
        for reason, per in series.counts.items():
            stack[series_of[reason]] += sum(per.get(b, 0) for b in buckets)
        stacks.append(stack)
    top = _nice_ceiling(max((sum(s) for s in stacks), default=0))
    plot_width = width - PLOT_LEFT - PLOT_RIGHT
    plot_height = PLOT_BOTTOM - PLOT_TOP
    slot = plot_width / max(1, len(groups))
    names = {item.series: item.title for item in legend}
    bars = []
    for index, (buckets, stack) in enumerate(zip(groups, stacks, strict=True)):
        when = buckets[0] if len(buckets) == 1 else f"{buckets[0]} to {buckets[-1]}"
        y = float(PLOT_BOTTOM)
        segments = []
        for number, count in enumerate(stack):
            if not count:
                continue
            height = plot_height * count / top
            y -= height
            segments.append(
                Segment(number, round(y, 2), round(height, 2), f"{when}: {names[number]}: {count}")
            )
        gap = min(slot * 0.2, 6)
        bars.append(Bar(round(PLOT_LEFT + index * slot + gap / 2, 2), round(slot - gap, 2), segments))
    steps = (0, top // 2, top) if top % 2 == 0 else (0, top)  # whole numbers only
    ticks = [Tick(round(PLOT_BOTTOM - plot_height * n / top, 2), str(n)) for n in steps]
    every = max(1, math.ceil(len(groups) / (NARROW_LABELS if narrow else WIDE_LABELS)))
    labels = [
        AxisLabel(round(PLOT_LEFT + (i + 0.5) * slot, 2), _bucket_label(g[0], series.hourly))
        for i, g in enumerate(groups)
        if i % every == 0
    ]
    unit = "hour" if series.hourly else "day" if group == 1 else f"{group} days"
    total = series.total
    summary = ", ".join(f"{item.title}: {item.count}" for item in legend) or "none"
    description = (
        f"Failed messages per {unit} (UTC) from {isoformat(series.start)} to {isoformat(series.end)}:"
        f" {total} in all ({summary})."
    )
    return Chart(
        "narrow" if narrow else "wide",
        width,
        CHART_HEIGHT,
        PLOT_LEFT,
        PLOT_RIGHT,
        PLOT_BOTTOM,
        bars,
        ticks,
        labels,
        legend,
        total,
        series.start,
        series.end,
        unit,
        description,
    )


# --- the pages ------------------------------------------------------------------------------------


def _form(
    date_from: str | None,
    date_to: str | None,
    channel: str | None,
    status: str | None,
    number: str | None,
    template: str | None,
    error_code: str | None,
) -> LogForm:
    return LogForm(
        *(
            (value or "").strip()
            for value in (date_from, date_to, channel, status, number, template, error_code)
        )
    )


async def _channel_names(gateway: Gateway, user: SessionUser) -> tuple[list[views.Inbox], dict[int, str]]:
    inboxes = await views.inboxes_of(gateway, user)
    return inboxes, {inbox.id: inbox.name for inbox in inboxes}


@router.get("/messages")
async def message_log(
    request: Request,
    gateway: GatewayDep,
    user: User,
    date_from: Annotated[str | None, Query(alias="from", max_length=20)] = None,
    to: Annotated[str | None, Query(max_length=20)] = None,
    channel: Annotated[str | None, Query(max_length=20)] = None,
    status: Annotated[str | None, Query(max_length=20)] = None,
    number: Text = None,
    template: Annotated[str | None, Query(max_length=512)] = None,
    error_code: Text = None,
    before: Annotated[str | None, Query(max_length=40)] = None,
) -> HTMLResponse:
    form = _form(date_from, to, channel, status, number, template, error_code)
    inboxes, names = await _channel_names(gateway, user)
    context: dict[str, Any] = {
        "form": form,
        "inboxes": inboxes,
        "statuses": STATUSES,
        "csv_max_rows": CSV_MAX_ROWS,
    }
    try:
        filters = form.filters()
        page = await list_messages(
            gateway, principal=user.principal, filters=filters, before=before or None, limit=PAGE_SIZE
        )
        failures = await failures_over_time(gateway, principal=user.principal, filters=filters)
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
    chart = failure_chart(failures)
    return render(
        request,
        "message_log.html",
        rows=rows,
        chart=chart,
        charts=[chart, failure_chart(failures, narrow=True)],
        older=f"/messages?{form.query(before=page.next_before)}" if page.next_before else None,
        newest=f"/messages?{form.query()}" if before else None,
        csv_url=f"/messages.csv?{form.query()}" if form.filtered else "/messages.csv",
        **context,
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
            sent_by(sent),
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
    date_from: Annotated[str | None, Query(alias="from", max_length=20)] = None,
    to: Annotated[str | None, Query(max_length=20)] = None,
    channel: Annotated[str | None, Query(max_length=20)] = None,
    status: Annotated[str | None, Query(max_length=20)] = None,
    number: Text = None,
    template: Annotated[str | None, Query(max_length=512)] = None,
    error_code: Text = None,
) -> Response:
    """Every message the filters select, newest first, up to CSV_MAX_ROWS, streamed page by page."""
    form = _form(date_from, to, channel, status, number, template, error_code)
    _, names = await _channel_names(gateway, user)
    try:
        filters = form.filters()
        # The first page before the first byte: a refusal is a page, not a broken download.
        first = await list_messages(gateway, principal=user.principal, filters=filters, limit=CSV_PAGE_SIZE)
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
                gateway,
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
