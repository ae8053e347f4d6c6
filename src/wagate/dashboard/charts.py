"""The dashboard's charts, drawn here as SVG (no library): failures per hour or day stacked by reason on
the message log (`failure_chart`), messages and cost per day stacked by category on `/usage`
(`usage_chart`). This module makes each chart's geometry in the SVG's own units (it scales to the width
of its box); `_message_log_chart.html` and `_usage_chart.html` draw it.

Each chart is drawn twice (`Size`), wide for screens and narrow for phones, and CSS shows one of the
two. The phone's is about half as wide, so that its 12-unit text stays about 11 px on a 390 px screen
instead of shrinking to 5, with fewer bars and labels.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import TypeVar

from wagate.core.db import isoformat
from wagate.dashboard import views
from wagate.messages.queries import FailureSeries
from wagate.messages.schemas import format_amount
from wagate.usage.models import Period, UsageCategory, UsageReport

# --- what both charts have -------------------------------------------------------------------------

T = TypeVar("T")


@dataclass(frozen=True)
class Size:
    """A drawing of a chart: wide for screens, narrow for phones."""

    name: str  # "wide" or "narrow"
    width: int
    labels: int  # at most this many bars named under the axis
    bars: int | None = None  # at most this many bars (neighbours share one beyond); None: one each


@dataclass(frozen=True)
class Tick:
    y: float
    label: str


@dataclass(frozen=True)
class AxisLabel:
    x: float
    label: str


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5 times a power of ten at or above `value` (at least 1)."""
    if value <= 1:
        return 1
    power: int = 10 ** (len(str(value)) - 1)
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def stacked(bottom: float, heights: Sequence[float]) -> list[tuple[float, float]]:
    """Segments of these heights stacked upwards from `bottom`, the first lowest: each one's top and
    height, rounded to hundredths."""
    y = float(bottom)
    segments = []
    for height in heights:
        y -= height
        segments.append((round(y, 2), round(height, 2)))
    return segments


def axis_labels(
    left: float, slot: float, bars: Sequence[T], size: Size, label: Callable[[T], str]
) -> list[AxisLabel]:
    """Labels under the middle of every so many bars (`slot` units apart), at most `size.labels`."""
    every = max(1, math.ceil(len(bars) / size.labels))
    return [
        AxisLabel(round(left + (index + 0.5) * slot, 2), label(bar))
        for index, bar in enumerate(bars)
        if index % every == 0
    ]


# --- the message log: failures per hour or day, stacked by reason ------------------------------------

FAILURES_WIDE = Size("wide", 720, 8, 62)
FAILURES_NARROW = Size("narrow", 360, 3, 31)
FAILURES_HEIGHT = 240
PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM = 44, 12, 14, 206
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
class LegendItem:
    series: int
    reason: str
    title: str
    count: int


@dataclass(frozen=True)
class FailureChart:
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


def _bucket_label(bucket: str, hourly: bool) -> str:
    if hourly:
        day, _, hour = bucket.partition(" ")
        return f"{day[5:]} {hour}:00"
    return bucket[5:]  # MM-DD


def failure_chart(series: FailureSeries, size: Size = FAILURES_WIDE) -> FailureChart:
    """The chart drawn for a screen (`FAILURES_WIDE`, 720 units wide) or for a phone."""
    width = size.width
    totals = {reason: sum(per.values()) for reason, per in series.counts.items()}
    ranked = sorted(totals, key=lambda r: (-totals[r], r))
    legend = [LegendItem(i, r, reason_title(r), totals[r]) for i, r in enumerate(ranked[:SERIES])]
    if len(ranked) > SERIES:
        legend.append(LegendItem(SERIES, "other", "Other", sum(totals[r] for r in ranked[SERIES:])))
    series_of = {r: min(i, SERIES) for i, r in enumerate(ranked)}
    # Long ranges: neighbouring days share a bar, so that bars stay wide enough to see.
    group = max(1, math.ceil(len(series.buckets) / size.bars)) if size.bars else 1
    groups = [series.buckets[i : i + group] for i in range(0, len(series.buckets), group)]
    stacks: list[list[int]] = []
    for buckets in groups:
        stack = [0] * (SERIES + 1)
        for reason, per in series.counts.items():
            stack[series_of[reason]] += sum(per.get(b, 0) for b in buckets)
        stacks.append(stack)
    top = nice_ceiling(max((sum(s) for s in stacks), default=0))
    plot_width = width - PLOT_LEFT - PLOT_RIGHT
    plot_height = PLOT_BOTTOM - PLOT_TOP
    slot = plot_width / max(1, len(groups))
    names = {item.series: item.title for item in legend}
    bars = []
    for index, (buckets, stack) in enumerate(zip(groups, stacks, strict=True)):
        when = buckets[0] if len(buckets) == 1 else f"{buckets[0]} to {buckets[-1]}"
        shown = [(number, count) for number, count in enumerate(stack) if count]
        placed = stacked(PLOT_BOTTOM, [plot_height * count / top for _, count in shown])
        segments = [
            Segment(number, y, height, f"{when}: {names[number]}: {count}")
            for (number, count), (y, height) in zip(shown, placed, strict=True)
        ]
        gap = min(slot * 0.2, 6)
        bars.append(Bar(round(PLOT_LEFT + index * slot + gap / 2, 2), round(slot - gap, 2), segments))
    steps = (0, top // 2, top) if top % 2 == 0 else (0, top)  # whole numbers only
    ticks = [Tick(round(PLOT_BOTTOM - plot_height * n / top, 2), str(n)) for n in steps]
    labels = axis_labels(PLOT_LEFT, slot, groups, size, lambda g: _bucket_label(g[0], series.hourly))
    unit = "hour" if series.hourly else "day" if group == 1 else f"{group} days"
    total = series.total
    summary = ", ".join(f"{item.title}: {item.count}" for item in legend) or "none"
    description = (
        f"Failed messages per {unit} (UTC) from {isoformat(series.start)} to {isoformat(series.end)}:"
        f" {total} in all ({summary})."
    )
    return FailureChart(
        size.name,
        width,
        FAILURES_HEIGHT,
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


# --- /usage: messages (upper panel) and cost (lower panel) per day, stacked by category --------------

USAGE_WIDE = Size("wide", 760, 8)
USAGE_NARROW = Size("narrow", 360, 4)
PANEL_LEFT = 56  # room for the tick labels
PANEL_RIGHT = 12
PANEL_TOP = 30  # the upper panel's
PANEL_HEIGHT = 140
PANEL_GAP = 56
CATEGORY_LABELS = {
    UsageCategory.AUTHENTICATION: "Authentication",
    UsageCategory.UTILITY: "Utility",
    UsageCategory.MARKETING: "Marketing",
    UsageCategory.SESSION: "Session",
}


@dataclass(frozen=True)
class UsageBar:
    x: float
    y: float
    width: float
    height: float
    category: str  # a UsageCategory's value, its CSS class
    title: str


@dataclass(frozen=True)
class Panel:
    title: str
    top: float
    bottom: float
    ticks: list[Tick]
    bars: list[UsageBar]


@dataclass(frozen=True)
class UsageChart:
    size: str
    width: int
    height: int
    left: int
    right: int
    panels: list[Panel]
    days: list[AxisLabel]
    description: str


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
    step = nice_ceiling(math.ceil(highest / 4))  # four steps or fewer reach the highest
    scale_top = step * math.ceil(highest / step)
    per_unit = PANEL_HEIGHT / scale_top
    ticks = [Tick(bottom - value * per_unit, label(value)) for value in range(0, scale_top + 1, step)]
    slot = (size.width - PANEL_LEFT - PANEL_RIGHT) / len(days)
    width = max(1.0, slot * 0.7)
    bars: list[UsageBar] = []
    for index, day in enumerate(days):
        x = PANEL_LEFT + index * slot + (slot - width) / 2
        shown = [(c, value) for c in UsageCategory if (value := values.get((day, c), 0))]
        placed = stacked(bottom, [value * per_unit for _, value in shown])
        bars.extend(
            UsageBar(round(x, 2), y, round(width, 2), height, category.value, describe(day, category, value))
            for (category, value), (y, height) in zip(shown, placed, strict=True)
        )
    return Panel(title, top, bottom, ticks, bars)


def usage_chart(report: UsageReport, size: Size = USAGE_WIDE) -> UsageChart:
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
    upper = _panel(size, "Messages", PANEL_TOP, period, messages, str, said_messages)
    lower_top = upper.bottom + PANEL_GAP
    lower = _panel(size, f"Cost ({currency})", lower_top, period, micros, format_amount, said_cost)
    days = period.each_day()
    slot = (size.width - PANEL_LEFT - PANEL_RIGHT) / len(days)
    labels = axis_labels(PANEL_LEFT, slot, days, size, _day)
    total = format_amount(report.amount_micros)
    description = (
        f"Messages and cost per day and category, {period.first.isoformat()} until"
        f" {period.last.isoformat()}: {report.messages} messages, {report.failed} failed, {total} {currency}."
    )
    return UsageChart(
        size.name,
        size.width,
        int(lower.bottom) + 28,
        PANEL_LEFT,
        PANEL_RIGHT,
        [upper, lower],
        labels,
        description,
    )
