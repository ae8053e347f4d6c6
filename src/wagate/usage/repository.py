"""The SQL of usage: one GROUP BY over the account's outbound messages, by UTC day, channel and category.

The same statement runs on SQLite and PostgreSQL. The day is computed in SQL from `created_at`, which
SQLite keeps as text in UTC ('YYYY-MM-DD HH:MM:SS.ffffff', see wagate.core.tables.UTCDateTime) and PostgreSQL
as a `timestamptz` (its day depends on the session's time zone unless taken `AT TIME ZONE 'UTC'`).
Nothing grouped holds a bound parameter: PostgreSQL would see `$1` in the select list and `$4` in the
GROUP BY as different expressions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import String, case, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from wagate.channels.models import Channel, ChannelMember
from wagate.messages.models import Direction, Message, MessageStatus


class UtcDay(FunctionElement[str]):
    """`YYYY-MM-DD` of a UTCDateTime column's UTC day, as text."""

    type = String()
    name = "utc_day"
    inherit_cache = True


@compiles(UtcDay)
def _utc_day_sqlite(element: UtcDay, compiler: SQLCompiler, **kw: Any) -> str:
    # SQLite's date() reads the stored text (and would apply an offset, were one ever stored).
    return f"date({compiler.process(element.clauses, **kw)})"


@compiles(UtcDay, "postgresql")
def _utc_day_postgresql(element: UtcDay, compiler: SQLCompiler, **kw: Any) -> str:
    return f"to_char(({compiler.process(element.clauses, **kw)}) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


@dataclass(frozen=True)
class GroupedUsage:
    """One row of the GROUP BY: the category as stored (Meta's or the template's, or SESSION)."""

    day: date
    channel_id: int
    category: str
    messages: int
    failed: int
    amount_micros: int


async def grouped_usage(
    session: AsyncSession,
    *,
    account_id: int,
    start: datetime,
    end: datetime,
    channel_id: int | None = None,
    member_user_id: int | None = None,
) -> list[GroupedUsage]:
    """The account's outbound messages created in [start, end), grouped; only the channel `channel_id`
    when given, only the inboxes of `member_user_id` when given. A failed message costs 0."""
    day = UtcDay(Message.created_at)
    category = func.coalesce(Message.cost_category, Message.template_category, literal_column("'SESSION'"))
    failed = Message.status == MessageStatus.failed
    query = (
        select(
            day,
            Message.channel_id,
            category,
            func.count(),
            func.sum(case((failed, 1), else_=0)),
            func.sum(case((failed, 0), else_=Message.cost_micros)),
        )
        .where(
            Message.account_id == account_id,
            Message.direction == Direction.outbound,
            # What the account sent: not the replies of Meta's AI agent (echoes on `standby`), which
            # are neither messages of the API nor priced by the gateway.
            Message.sent_by.is_(None),
            Message.created_at >= start,
            Message.created_at < end,
        )
        .group_by(day, Message.channel_id, category)
    )
    if channel_id is not None:
        query = query.where(Message.channel_id == channel_id)
    if member_user_id is not None:
        inboxes = select(ChannelMember.channel_id).where(ChannelMember.user_id == member_user_id)
        query = query.where(Message.channel_id.in_(inboxes))
    rows = await session.execute(query)
    return [
        GroupedUsage(
            day=date.fromisoformat(str(row[0])),
            channel_id=int(row[1]),
            category=str(row[2]),
            messages=int(row[3]),
            failed=int(row[4] or 0),
            amount_micros=int(row[5] or 0),
        )
        for row in rows
    ]


async def account_channels(session: AsyncSession, *, account_id: int) -> Sequence[Channel]:
    return (
        await session.scalars(select(Channel).where(Channel.account_id == account_id).order_by(Channel.id))
    ).all()


async def is_account_channel(session: AsyncSession, *, account_id: int, channel_id: int) -> bool:
    found = await session.scalar(
        select(Channel.id).where(Channel.id == channel_id, Channel.account_id == account_id)
    )
    return found is not None
