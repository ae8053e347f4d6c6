"""What a usage report is made of: a period of whole UTC days and rows per day, channel and category.

No table of its own: usage is read from the messages (wagate.messages.models.Message).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta


class UsageCategory(enum.StrEnum):
    """The categories of a usage row, in the order reports list them."""

    AUTHENTICATION = "AUTHENTICATION"
    UTILITY = "UTILITY"
    MARKETING = "MARKETING"
    SESSION = "SESSION"


CATEGORY_ORDER = {category: position for position, category in enumerate(UsageCategory)}


@dataclass(frozen=True)
class Period:
    """Whole UTC days, both ends included."""

    first: date
    last: date

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1

    @property
    def start(self) -> datetime:
        """The first instant of the period (UTC)."""
        return datetime.combine(self.first, time.min, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        """The first instant after the period (UTC)."""
        return datetime.combine(self.last + timedelta(days=1), time.min, tzinfo=UTC)

    def each_day(self) -> list[date]:
        return [self.first + timedelta(days=n) for n in range(self.days)]


@dataclass(frozen=True)
class UsageRow:
    """Outbound messages of one UTC day, channel and category; failed ones count, and cost 0."""

    day: date
    channel_id: int
    category: UsageCategory
    messages: int
    failed: int
    amount_micros: int


@dataclass(frozen=True)
class UsageReport:
    currency: str
    period: Period
    channel_id: int | None  # the filter, when one was given
    rows: list[UsageRow]

    @property
    def messages(self) -> int:
        return sum(row.messages for row in self.rows)

    @property
    def failed(self) -> int:
        return sum(row.failed for row in self.rows)

    @property
    def amount_micros(self) -> int:
        return sum(row.amount_micros for row in self.rows)
