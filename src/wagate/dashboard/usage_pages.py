"""`/usage` (API.md section 12, issue 12 point 5): messages and cost per day and category as a chart
drawn here as SVG (no library), a table, a channel filter, a date range and `Download CSV`, which is
exactly the CSV of `GET /v1/accounts/{id}/usage` (the same service and the same writer)."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from wagate.accounts.service import SessionUser
from wagate.api.deps import GatewayDep
from wagate.core.errors import InvalidRequest, WagateError
from wagate.dashboard.web import current_user, error_page, render
from wagate.http.limits import parse_id
from wagate.messages.schemas import format_amount
from wagate.usage.models import Period, UsageCategory, UsageReport
from wagate.usage.schemas import CSV_MEDIA_TYPE, csv_filename, usage_csv
from wagate.usage.service import usage_channels, usage_period, usage_report

router = APIRouter(include_in_schema=False)
User = Annotated[SessionUser, Depends(current_user)]
TextQuery = Annotated[str | None, Query()]
FromQuery = Annotated[str | None, Query(alias="from")]
DIGITS = re.compile(r"[0-9]{1,19}")
PAGE_SIZE = 100

# The chart's geometry, in the SVG's own units (it scales to the width of its box).
LEFT = 56  # room for the tick labels
RIGHT = 12
PANEL_HEIGHT = 140
PANEL_GAP = 56
TOP = 30
CATEGORY_LABELS = {
    UsageCategory.AUTHENTICATION: "Authentication",
    UsageCategory.UTILITY: "Utility",
    UsageCategory.MARKETING: "Marketing",
    UsageCategory.SESSION: "Session",
}


@dataclass(frozen=True)
class Size:
    """A drawing of the chart: wide for screens, narrow for phones (CSS shows one), so that its text
    stays readable at either width."""

    name: str
    width: int
    day_labels: int  # at most this many days named under the bars

    @property
    def plot_width(self) -> int:
        return self.width - LEFT - RIGHT


WIDE = Size("wide", 760, 8)
NARROW = Size("narrow", 360, 4)


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    category: str  # a UsageCategory's value, its CSS class
    title: str


@dataclass(frozen=True)
class Tick:
    y: float
    label: str


@dataclass(frozen=True)
class Panel:
    title: str
    top: float
    bottom: float
    ticks: list[Tick]
    bars: list[Bar]


@dataclass(frozen=True)
class DayLabel:
    x: float
    label: str


@dataclass(frozen=True)
class Chart:
    size: str
    width: int
    height: int
    left: int
    right: int
    panels: list[Panel]
    days: list[DayLabel]
    description: str


def nice_step(maximum: int, ticks: int = 4) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50... whose `ticks` steps reach `maximum` (whole units)."""
    raw = max(1, math.ceil(maximum / ticks))
    magnitude = int("1" + "0" * (len(str(raw)) - 1))
    for factor in (1, 2, 5, 10):
        if factor * magnitude >= raw:
            return factor * magnitude
    return 10 * magnitude  # not reached: 10 x magnitude always reaches raw


def _day(day: date) -> str:
    return f"{day.day} {day:%b}"


def _panel(
    size: Size,
    title: str,
    top: float,
    period: Period,
    values: dict[tuple[date, UsageCategory], int],
    label: Callable[[int], str],
    describe: Callable[[date, UsageCategory, int], str],
) -> Panel:
    """Bars per day, one segment per category stacked in the order of UsageCategory; `values` in whole
    units (messages, or millionths of the currency), `label` writes a value for an axis tick."""
    days = period.each_day()
    totals = [sum(values.get((day, category), 0) for category in UsageCategory) for day in days]
    highest = max(totals, default=0)
    bottom = top + PANEL_HEIGHT
    if highest == 0:
        return Panel(title, top, bottom, [Tick(bottom, label(0))], [])
    step = nice_step(highest)
    scale_top = step * math.ceil(highest / step)
    per_unit = PANEL_HEIGHT / scale_top
    ticks = [Tick(bottom - value * per_unit, label(value)) for value in range(0, scale_top + 1, step)]
    slot = size.plot_width / len(days)
    width = max(1.0, slot * 0.7)
    bars = []
    for index, day in enumerate(days):
        x = LEFT + index * slot + (slot - width) / 2
        y = bottom
        for category in UsageCategory:
            value = values.get((day, category), 0)
            if value == 0:
                continue
            height = value * per_unit
            y -= height
            bars.append(
                Bar(
                    round(x, 2),
                    round(y, 2),
                    round(width, 2),
                    round(height, 2),
                    category.value,
                    describe(day, category, value),
                )
            )
    return Panel(title, top, bottom, ticks, bars)


def usage_chart(report: UsageReport, size: Size = WIDE) -> Chart:
    """Messages (upper panel) and cost (lower panel) per day, stacked by category, all channels of the
    report added."""
    messages: dict[tuple[date, UsageCategory], int] = defaultdict(int)
    failed: dict[tuple[date, UsageCategory], int] = defaultdict(int)
    micros: dict[tuple[date, UsageCategory], int] = defaultdict(int)
    for row in report.rows:
        messages[row.day, row.category] += row.messages
        failed[row.day, row.category] += row.failed
        micros[row.day, row.category] += row.amount_micros
    currency = report.currency

    def said_messages(day: date, category: UsageCategory, value: int) -> str:
        failures = failed[day, category]
        extra = f" ({failures} failed)" if failures else ""
        plural = "" if value == 1 else "s"
        return f"{day.isoformat()} · {CATEGORY_LABELS[category]}: {value} message{plural}{extra}"

    def said_cost(day: date, category: UsageCategory, value: int) -> str:
        return f"{day.isoformat()} · {CATEGORY_LABELS[category]}: {format_amount(value)} {currency}"

    period = report.period
    upper = _panel(size, "Messages", TOP, period, messages, str, said_messages)
    lower_top = upper.bottom + PANEL_GAP
    lower = _panel(size, f"Cost ({currency})", lower_top, period, micros, format_amount, said_cost)
    days = period.each_day()
    slot = size.plot_width / len(days)
    every = math.ceil(len(days) / size.day_labels)
    labels = [
        DayLabel(round(LEFT + index * slot + slot / 2, 2), _day(day))
        for index, day in enumerate(days)
        if index % every == 0
    ]
    total = format_amount(report.amount_micros)
    description = (
        f"Messages and cost per day and category, {period.first.isoformat()} until"
        f" {period.last.isoformat()}: {report.messages} messages, {report.failed} failed, {total} {currency}."
    )
    return Chart(
        size.name, size.width, int(lower.bottom) + 28, LEFT, RIGHT, [upper, lower], labels, description
    )


@dataclass(frozen=True)
class Filters:
    first: str
    last: str
    channel_id: int | None

    def query(self, **extra: str | int) -> str:
        values: dict[str, str | int] = {"from": self.first, "to": self.last}
        if self.channel_id is not None:
            values["channel_id"] = self.channel_id
        return urlencode({**values, **extra})


def _channel_id(text: str | None) -> int | None:
    """The channel filter: empty for all channels."""
    if not text:
        return None
    channel_id = parse_id(text)
    if channel_id is None:
        raise InvalidRequest(
            "The request is not valid: channel_id: must be a channel's id.",
            details=[{"field": "channel_id", "issue": "must be a channel's id"}],
        )
    return channel_id


def _page_number(text: str | None) -> int:
    return int(text) if text and DIGITS.fullmatch(text) and 0 < int(text) < 100_000 else 1


async def _report(
    gateway: GatewayDep, user: SessionUser, first: str | None, last: str | None, channel: str | None
) -> UsageReport:
    period = usage_period(first, last)
    async with gateway.db.read() as session:
        return await usage_report(
            session,
            principal=user.principal,
            period=period,
            currency=gateway.settings.currency,
            channel_id=_channel_id(channel),
        )


async def _channels(gateway: GatewayDep, user: SessionUser) -> Sequence[tuple[int, str, str]]:
    async with gateway.db.read() as session:
        return [
            (c.id, c.name, c.phone_number) for c in await usage_channels(session, principal=user.principal)
        ]


@router.get("/usage")
async def usage_page(
    request: Request,
    gateway: GatewayDep,
    user: User,
    first: FromQuery = None,
    to: TextQuery = None,
    channel_id: TextQuery = None,
    page: TextQuery = None,
) -> HTMLResponse:
    channels = await _channels(gateway, user)
    form = {"from": first or "", "to": to or "", "channel_id": channel_id or ""}
    try:
        report = await _report(gateway, user, first, to, channel_id)
    except InvalidRequest as error:
        return render(
            request, "usage.html", status_code=error.status_code, channels=channels, form=form, error=error
        )
    except WagateError as error:
        return error_page(request, error)
    filters = Filters(report.period.first.isoformat(), report.period.last.isoformat(), report.channel_id)
    number = _page_number(page)
    pages = max(1, math.ceil(len(report.rows) / PAGE_SIZE))
    number = min(number, pages)
    shown = report.rows[(number - 1) * PAGE_SIZE : number * PAGE_SIZE]
    names = {channel_id: name for channel_id, name, _ in channels}
    return render(
        request,
        "usage.html",
        channels=channels,
        form={"from": filters.first, "to": filters.last, "channel_id": str(report.channel_id or "")},
        report=report,
        charts=[usage_chart(report, size) for size in (WIDE, NARROW)],
        categories=[(category.value, CATEGORY_LABELS[category]) for category in UsageCategory],
        rows=shown,
        first_row=(number - 1) * PAGE_SIZE + 1,
        page=number,
        pages=pages,
        names=names,
        amount=format_amount,
        filters=filters,
    )


@router.get("/usage/csv")
async def usage_csv_download(
    request: Request,
    gateway: GatewayDep,
    user: User,
    first: FromQuery = None,
    to: TextQuery = None,
    channel_id: TextQuery = None,
) -> Response:
    """The API's CSV of the same filters (`Accept: text/csv` on `GET /v1/accounts/{id}/usage`)."""
    try:
        report = await _report(gateway, user, first, to, channel_id)
    except WagateError as error:
        return error_page(request, error)
    return Response(
        usage_csv(report),
        media_type=CSV_MEDIA_TYPE,
        headers={
            "Content-Disposition": f'attachment; filename="{csv_filename(report)}"',
            "Cache-Control": "no-store",
        },
    )
