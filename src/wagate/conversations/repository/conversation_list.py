"""The dashboard's conversation list: a page of a view (a status tab or "Needs reply"), with search,
the count of each view, and one conversation's row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, String, func, literal, or_, select, tuple_, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from wagate.accounts.models import User
from wagate.channels.models import Channel
from wagate.conversations.models import HANDLED_BY_APP, Contact, Conversation, ConversationStatus, CustomerId
from wagate.conversations.search import fold, like_pattern, phone_digits, user_id_prefix


@dataclass(frozen=True)
class ConversationRow:
    """A conversation as the dashboard lists it, with its customer and inbox."""

    id: int
    channel_id: int
    channel_name: str
    status: ConversationStatus
    last_activity_at: datetime
    last_customer_message_at: datetime | None
    phone_number: str | None
    name: str | None
    username: str | None
    user_id: str | None
    handled_by: str = HANDLED_BY_APP  # or "meta_business_agent" (API.md section 14)
    # The last message (see `LastMessage`): its preview, who wrote it (FROM_*), the template's name,
    # the agent's name; and since when the customer waits for an answer (None: answered).
    last_message_text: str | None = None
    last_message_from: str | None = None
    last_message_author: str | None = None
    last_message_agent: str | None = None
    waiting_since: datetime | None = None


def _rows_query() -> Select[Any]:
    # One current user id per customer for those known without a number (shown by username or user
    # id): a correlated subquery on an indexed column, part of the one statement (no query per row).
    user_id = (
        select(func.min(CustomerId.user_id))
        .where(CustomerId.contact_id == Contact.id, CustomerId.replaced_by.is_(None))
        .scalar_subquery()
    )
    return (
        select(
            Conversation.id,
            Conversation.channel_id,
            Channel.name,
            Conversation.status,
            Conversation.last_activity_at,
            Conversation.last_customer_message_at,
            Contact.phone_number,
            Contact.name,
            Contact.username,
            user_id,
            Conversation.handled_by,
            Conversation.last_message_text,
            Conversation.last_message_from,
            Conversation.last_message_author,
            User.name,
            Conversation.waiting_since,
        )
        .join(Contact, Contact.id == Conversation.contact_id)
        .join(Channel, Channel.id == Conversation.channel_id)
        # The agent who wrote the last message, by primary key: their name as it is now.
        .outerjoin(User, User.id == Conversation.last_message_agent_id)
    )


def _matches(account_id: int, search: str) -> ColumnElement[bool] | None:
    """A search's condition (conversations/search.py): the folded query in the contact's folded name
    and username or in the folded last message; a query typed as a number also in the number's
    digits (a leading trunk 0 of a local number aside), one typed as a user id as its start. None
    when the query folds to nothing."""
    folded = fold(search.strip())
    if not folded.strip():
        return None
    pattern = like_pattern(folded)
    conditions: list[ColumnElement[bool]] = [
        Contact.search_key.like(pattern, escape="\\"),
        Conversation.last_message_key.like(pattern, escape="\\"),
    ]
    digits = phone_digits(search)
    if digits is not None:
        conditions.append(Contact.phone_number.like(like_pattern(digits), escape="\\"))
        if digits.startswith("0") and len(digits) > 3:
            conditions.append(Contact.phone_number.like(like_pattern(digits[1:]), escape="\\"))
    prefix = user_id_prefix(search)
    if prefix is not None:
        conditions.append(
            Contact.id.in_(
                select(CustomerId.contact_id).where(
                    CustomerId.account_id == account_id,
                    CustomerId.user_id.like(like_pattern(prefix)[1:], escape="\\"),
                )
            )
        )
    return or_(*conditions)


# The list's views: a status tab, or "Needs reply" (every status, the customer waiting).
NEEDS_REPLY = "needs_reply"


def _scope(
    query: Select[*tuple[Any, ...]], *, account_id: int, channel_ids: list[int], search: str | None
) -> Select[*tuple[Any, ...]]:
    query = query.where(Conversation.account_id == account_id, Conversation.channel_id.in_(channel_ids))
    matches = _matches(account_id, search) if search else None
    return query.where(matches) if matches is not None else query


async def list_conversations(
    session: AsyncSession,
    *,
    account_id: int,
    channel_ids: list[int],
    status: ConversationStatus | str,
    search: str | None,
    before: tuple[datetime, int] | None,
    limit: int,
) -> list[ConversationRow]:
    """One page of the conversations of these inboxes with this status, newest activity first;
    `before` is the (last_activity_at, id) of the last row of the page before (keyset paging, served
    by ix_conversations_account_list, or ix_conversations_inbox_list for one inbox, however many there
    are). `status` NEEDS_REPLY: those whose customer waits, of any status, longest waiting first,
    `before` then being the (waiting_since, id) of the last row shown (ix_conversations_waiting)."""
    if not channel_ids:
        return []
    query = _scope(_rows_query(), account_id=account_id, channel_ids=channel_ids, search=search)
    if status == NEEDS_REPLY:
        query = query.where(Conversation.waiting_since.is_not(None))
        if before is not None:
            query = query.where(tuple_(Conversation.waiting_since, Conversation.id) > tuple_(*before))
        query = query.order_by(Conversation.waiting_since, Conversation.id)
    else:
        query = query.where(Conversation.status == ConversationStatus(status))
        if before is not None:
            at, conversation_id = before
            # A row value: both databases read it as a range of the index, not a scan.
            query = query.where(
                tuple_(Conversation.last_activity_at, Conversation.id) < tuple_(at, conversation_id)
            )
        query = query.order_by(Conversation.last_activity_at.desc(), Conversation.id.desc())
    return [ConversationRow(*row) for row in await session.execute(query.limit(limit))]


async def count_conversations(
    session: AsyncSession, *, account_id: int, channel_ids: list[int], search: str | None
) -> dict[str, int]:
    """How many conversations each view of the list holds (each status, and NEEDS_REPLY), for these
    inboxes and search: one statement. Without a search each part reads an index alone: the statuses
    the list's index, the waiting ones ix_conversations_waiting (only the waiting are in it)."""
    counts = {status.value: 0 for status in ConversationStatus} | {NEEDS_REPLY: 0}
    if not channel_ids:
        return counts

    def scoped(*columns: Any) -> Select[*tuple[Any, ...]]:
        query: Select[*tuple[Any, ...]] = select(*columns).select_from(Conversation)
        if search:  # the contact's key is read only by a search
            query = query.join(Contact, Contact.id == Conversation.contact_id)
        return _scope(query, account_id=account_id, channel_ids=channel_ids, search=search)

    view = Conversation.status.cast(String(20))  # a plain string, as NEEDS_REPLY is
    by_status = scoped(view, func.count()).group_by(Conversation.status)
    waiting = scoped(literal(NEEDS_REPLY, String(20)), func.count()).where(
        Conversation.waiting_since.is_not(None)
    )
    for name, count in await session.execute(union_all(by_status, waiting)):
        counts[name] = count
    return counts


async def conversation_row(
    session: AsyncSession, *, account_id: int, conversation_id: int
) -> ConversationRow | None:
    row = (
        await session.execute(
            _rows_query().where(Conversation.id == conversation_id, Conversation.account_id == account_id)
        )
    ).one_or_none()
    return ConversationRow(*row) if row is not None else None
