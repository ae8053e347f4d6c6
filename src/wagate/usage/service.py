"""Usage: how many messages the account sent, how many failed and what they cost, per UTC day, channel
and category (API.md section 11). The API and the dashboard's `/usage` page both call `usage_report`.

- Outbound messages only: API, bulk and agent sends; a customer's messages cost nothing and are not
  counted.
- The category is the one Meta charged when its status webhook recategorised the message
  (`cost_category`), else the template's, else SESSION (free text in the customer's window). Meta's
  finer pricing categories fold into the four (AUTHENTICATION_INTERNATIONAL into AUTHENTICATION,
  MARKETING_LITE into MARKETING, SERVICE into SESSION).
- Amounts are sums of the messages' costs in integer millionths, a failed message counting 0, so they
  add up exactly to the `cost.amount` of the messages (API.md section 5).
- Administrators see every channel of the account; agents only their inboxes' channels.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from wagate.accounts.auth import Principal
from wagate.accounts.models import Role
from wagate.channels.models import Channel
from wagate.channels.service import channel_for_member, member_channels
from wagate.core.errors import ChannelNotFound, InvalidRequest
from wagate.usage import repository
from wagate.usage.models import CATEGORY_ORDER, Period, UsageCategory, UsageReport, UsageRow

DEFAULT_DAYS = 30
MAX_DAYS = 366
# The dates a period may name: the day after the last one still has a first instant.
EARLIEST = date(1970, 1, 1)
LATEST = date(9999, 12, 30)
DATE_FORMAT = re.compile(r"\d{4}-\d{2}-\d{2}")


def _invalid(field: str, issue: str) -> InvalidRequest:
    return InvalidRequest(
        f"The request is not valid: {field}: {issue}.", details=[{"field": field, "issue": issue}]
    )


def _parse_date(field: str, text: str) -> date:
    if DATE_FORMAT.fullmatch(text) is None:
        raise _invalid(field, "must be a date as YYYY-MM-DD")
    try:
        value = date.fromisoformat(text)
    except ValueError:
        raise _invalid(field, "is not a date of the calendar") from None
    if not EARLIEST <= value <= LATEST:
        raise _invalid(field, f"must be between {EARLIEST.isoformat()} and {LATEST.isoformat()}")
    return value


def usage_period(first: str | None, last: str | None, *, today: date | None = None) -> Period:
    """The period of `from` and `to` (YYYY-MM-DD, UTC, both included): without them the last 30 days up
    to today; `to` alone means the 30 days up to it, `from` alone the days from it up to today. At most
    366 days; 422 `invalid_request` naming the field otherwise."""
    today = today or datetime.now(UTC).date()
    last_day = _parse_date("to", last) if last else today
    if first:
        first_day = _parse_date("from", first)
    else:
        first_day = max(EARLIEST, last_day - timedelta(days=DEFAULT_DAYS - 1))
    if first_day > last_day:
        raise _invalid("from", f"is after 'to' ({last_day.isoformat()})")
    period = Period(first_day, last_day)
    if period.days > MAX_DAYS:
        field = "to" if last else "from"
        raise _invalid(field, f"the period covers {period.days} days, at most {MAX_DAYS} are allowed")
    return period


def usage_category(stored: str) -> UsageCategory:
    """A message's category as usage reports it (the four of API.md section 11)."""
    name = stored.upper()
    if name.startswith("AUTHENTICATION"):
        return UsageCategory.AUTHENTICATION
    if name.startswith("MARKETING"):
        return UsageCategory.MARKETING
    if name.startswith("UTILITY"):
        return UsageCategory.UTILITY
    return UsageCategory.SESSION


async def usage_channels(session: AsyncSession, *, principal: Principal) -> Sequence[Channel]:
    """The channels whose usage the caller sees: all of the account's for an administrator, the
    caller's inboxes for an agent."""
    if principal.role is Role.administrator:
        return await repository.account_channels(session, account_id=principal.account_id)
    return await member_channels(session, principal=principal)


async def _check_channel(session: AsyncSession, principal: Principal, channel_id: int) -> None:
    """404 `channel_not_found` when the account has no such channel; 403 for an agent who is not a
    member of its inbox."""
    if principal.role is Role.administrator:
        if not await repository.is_account_channel(
            session, account_id=principal.account_id, channel_id=channel_id
        ):
            raise ChannelNotFound()
    else:
        await channel_for_member(session, principal=principal, channel_id=channel_id)


async def usage_report(
    session: AsyncSession,
    *,
    principal: Principal,
    period: Period,
    currency: str,
    channel_id: int | None = None,
) -> UsageReport:
    """The rows of the period (only where messages were sent), by day, channel and category."""
    if channel_id is not None:
        await _check_channel(session, principal, channel_id)
    grouped = await repository.grouped_usage(
        session,
        account_id=principal.account_id,
        start=period.start,
        end=period.end,
        channel_id=channel_id,
        member_user_id=None if principal.role is Role.administrator else principal.user_id,
    )
    # Meta's finer categories fold into the four: rows that fold together are added (integers).
    merged: dict[tuple[date, int, UsageCategory], list[int]] = {}
    for row in grouped:
        key = (row.day, row.channel_id, usage_category(row.category))
        sums = merged.setdefault(key, [0, 0, 0])
        sums[0] += row.messages
        sums[1] += row.failed
        sums[2] += row.amount_micros
    rows = [
        UsageRow(day, channel, category, messages, failed, amount)
        for (day, channel, category), (messages, failed, amount) in merged.items()
        if messages > 0
    ]
    rows.sort(key=lambda row: (row.day, row.channel_id, CATEGORY_ORDER[row.category]))
    return UsageReport(currency=currency, period=period, channel_id=channel_id, rows=rows)
