"""The price list by date: what a message costs on the day it is accepted (API.md section 14).

Meta changes what it charges on announced dates (from 2026-10-01 a session message costs the utility
rate, and a utility template inside the customer's window is charged again), so the gateway keeps a
list of entries, each in force from a UTC day until the next one. An operator replaces the list with a
setting (`WAGATE_PRICES` or `WAGATE_PRICE_LIST_FILE`, docs/deployment.md) and a restart, no release.
The list is parsed once, with the settings; a send only picks the entry in force (`PriceList.at`),
which is two comparisons while the day stays the same.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

# The cost and usage categories; SESSION is a free-text message inside the window (Meta's `service`).
TEMPLATE_CATEGORIES = ("AUTHENTICATION", "UTILITY", "MARKETING")
SESSION = "SESSION"
CATEGORIES = (*TEMPLATE_CATEGORIES, SESSION)
# Meta's names in a status's `pricing.category` for what the list prices as one of CATEGORIES:
# `service` is a session message; the international and lite variants are priced as their family.
_META_CATEGORIES = {
    "SERVICE": SESSION,
    "AUTHENTICATION_INTERNATIONAL": "AUTHENTICATION",
    "MARKETING_LITE": "MARKETING",
}
# Meta's announcement of 2026-07-01: from this day a session message costs the utility rate and a
# utility template inside the customer's window is no longer free.
SESSIONS_CHARGED_FROM = date(2026, 10, 1)
# What the spec prices (spec section 1): the rates of the default list.
SPEC_PRICES = {"AUTHENTICATION": "0.036", "UTILITY": "0.036", "MARKETING": "0.165"}


def cost_category(category: str) -> str | None:
    """One of CATEGORIES for a category as Meta or a template names it (any case); None when unknown."""
    upper = category.upper()
    upper = _META_CATEGORIES.get(upper, upper)
    return upper if upper in CATEGORIES else None


@dataclass(frozen=True, slots=True)
class PriceEntry:
    """The prices in force from `starts` (a UTC day), in millionths of the currency."""

    starts: date | None  # None: from the beginning (a flat price table)
    micros: Mapping[str, int]
    utility_free_in_window: bool

    def price_micros(self, category: str | None) -> int:
        """The price of a message of this category (None: a session message); 0 for a category the
        list does not know."""
        known = cost_category(category) if category is not None else SESSION
        return self.micros.get(known, 0) if known is not None else 0

    def send_micros(self, category: str | None, *, window_open: bool) -> int:
        """What a send costs at acceptance: a UTILITY template inside the customer's open window is
        free while this entry says so."""
        if (
            window_open
            and self.utility_free_in_window
            and category is not None
            and category.upper() == "UTILITY"
        ):
            return 0
        return self.price_micros(category)


class PriceList:
    """Entries by date; `at(when)` is the one in force at that instant. Before the first entry's day
    the first entry applies (an operator's list need not reach back to the first message)."""

    def __init__(self, entries: Sequence[PriceEntry]) -> None:
        if not entries:
            raise ValueError("the price list has no entry")
        self.entries = tuple(sorted(entries, key=lambda e: e.starts or date.min))
        self._starts = [_midnight(e.starts) for e in self.entries]
        # The entry of the last instant asked and the span it covers: sends ask for "now", which
        # stays inside one span for days.
        self._cached: tuple[datetime, datetime, PriceEntry] | None = None

    def at(self, when: datetime) -> PriceEntry:
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        cached = self._cached
        if cached is not None and cached[0] <= when < cached[1]:
            return cached[2]
        index = max(bisect.bisect_right(self._starts, when) - 1, 0)
        start = self._starts[index] if index > 0 else datetime.min.replace(tzinfo=UTC)
        end = self._starts[index + 1] if index + 1 < len(self._starts) else datetime.max.replace(tzinfo=UTC)
        entry = self.entries[index]
        self._cached = (start, end, entry)
        return entry

    def now(self) -> PriceEntry:
        return self.at(datetime.now(UTC))


def _midnight(day: date | None) -> datetime:
    return datetime.combine(day or date.min, time.min, tzinfo=UTC)


def _micros(amount: Decimal) -> int:
    return int(amount * 1_000_000)


class PriceListEntry(BaseModel):
    """One entry of the setting's list form (docs/deployment.md, "Prices by date")."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    starts: date = Field(alias="from", description="The UTC day from which the entry is in force")
    prices: dict[str, Decimal]
    utility_free_in_window: bool

    @field_validator("prices")
    @classmethod
    def _every_category(cls, prices: dict[str, Decimal]) -> dict[str, Decimal]:
        return _checked_prices(prices, required=CATEGORIES)


def _checked_prices(prices: Mapping[str, Any], *, required: Sequence[str]) -> dict[str, Decimal]:
    """Upper-case categories (Meta's `service` is SESSION), each price a decimal >= 0 with at most six
    decimals (costs are kept in millionths); every category of `required` present."""
    checked: dict[str, Decimal] = {}
    for name, value in prices.items():
        category = cost_category(str(name))
        if category is None:
            raise ValueError(f"unknown category {name!r}: use {', '.join(CATEGORIES)}")
        amount = Decimal(str(value))
        if not amount.is_finite() or amount < 0 or amount != amount.quantize(Decimal("0.000001")):
            raise ValueError(f"{name}: a price is a decimal of at least 0 with at most 6 decimals")
        checked[category] = amount
    missing = [c for c in required if c not in checked]
    if missing:
        raise ValueError(f"missing prices for {', '.join(missing)}")
    return checked


def _entry(starts: date | None, prices: Mapping[str, Decimal], *, utility_free_in_window: bool) -> PriceEntry:
    return PriceEntry(starts, {c: _micros(p) for c, p in prices.items()}, utility_free_in_window)


def price_list_from(setting: Mapping[str, Any] | Sequence[Any]) -> PriceList:
    """The list from the setting's value: a list of entries, or the flat table of older releases.

    A flat table (`{"AUTHENTICATION": "0.05", "UTILITY": "0.04", "MARKETING": "0.2"}`) gives its
    rates under Meta's rules by date: until 2026-09-30 a session message costs 0 and a UTILITY
    template in the window is free; from 2026-10-01 a session message costs the table's SESSION
    price, else its UTILITY price, and a UTILITY template in the window its price. So a deployment
    that set its own rates before this list existed keeps them, and follows Meta's change."""
    if isinstance(setting, Mapping):
        rates = _checked_prices(setting, required=TEMPLATE_CATEGORIES)
        before = {**rates, SESSION: Decimal(0)}
        after = {**rates, SESSION: rates.get(SESSION, rates["UTILITY"])}
        return PriceList(
            [
                _entry(None, before, utility_free_in_window=True),
                _entry(SESSIONS_CHARGED_FROM, after, utility_free_in_window=False),
            ]
        )
    entries = [e if isinstance(e, PriceListEntry) else PriceListEntry.model_validate(e) for e in setting]
    if not entries:
        raise ValueError("the price list has no entry")
    days = [e.starts for e in entries]
    if len(set(days)) != len(days):
        raise ValueError("two entries of the price list start on the same day")
    return PriceList(
        [_entry(e.starts, e.prices, utility_free_in_window=e.utility_free_in_window) for e in entries]
    )


_SETTING = TypeAdapter(dict[str, Decimal] | list[PriceListEntry])


def read_price_list_file(path: str) -> PriceList:
    """The list from a JSON file (the same two forms as `WAGATE_PRICES`); ValueError naming the file."""
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except OSError as exc:
        raise ValueError(f"cannot read the price list file {path}: {exc.strerror}") from None
    try:
        return price_list_from(_SETTING.validate_json(raw))
    except (ValidationError, ValueError) as exc:
        raise ValueError(f"the price list file {path} is not a valid price list: {exc}") from None
