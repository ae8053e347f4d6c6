"""The SQL of contacts and conversations: the upserts every send and customer message runs, and reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    String,
    bindparam,
    case,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    tuple_,
    union_all,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.accounts.models import User
from wagate.channels.models import Channel
from wagate.conversations.models import (
    HANDLED_BY_APP,
    LAST_MESSAGE_KEY_LENGTH,
    LAST_MESSAGE_LENGTH,
    TEMPLATE_NAME_LENGTH,
    Contact,
    Conversation,
    ConversationStatus,
    CustomerId,
    MarketingPreference,
)
from wagate.conversations.search import fold, like_pattern, phone_digits, user_id_prefix
from wagate.core.db import Base, detached, dialect_name, table_of, utcnow

# Who wrote a conversation's last message (`Conversation.last_message_from`).
FROM_CUSTOMER = "customer"
FROM_AGENT = "agent"  # a dashboard user (an agent's reply, text or template)
FROM_API = "api"  # a free-form message sent through the API: the company's system answering
FROM_TEMPLATE = "template"  # a template sent through the API or in bulk (an OTP, a notification)
FROM_META_AGENT = "meta_business_agent"  # Meta's AI agent, echoed on `standby` (API.md section 14)

# What ends a customer's waiting (issue 46), the one place it is decided: a reply written to the
# customer, by an agent in the dashboard, by the company's system as free text through the API, or
# by Meta's AI agent while it holds the conversation. A template sent through the API or in bulk
# (an OTP code, a notification) answers nothing: it resolves the conversation (spec section 3) but
# the customer still waits, and "Needs reply" keeps showing them. A customer's message starts the
# waiting when they were not waiting already; Meta's system notices (a user id change) do neither.
ENDS_WAITING = frozenset({FROM_AGENT, FROM_API, FROM_META_AGENT})


def written_by(*, inbound: bool, template: bool, agent_user_id: int | None, sent_by: str | None) -> str:
    """Who wrote a message, as `last_message_from` records it."""
    if inbound:
        return FROM_CUSTOMER
    if sent_by is not None:
        return FROM_META_AGENT
    if agent_user_id is not None:
        return FROM_AGENT
    return FROM_TEMPLATE if template else FROM_API


@dataclass(frozen=True)
class LastMessage:
    """What a conversation keeps of its last message: what the list shows and search reads (a
    template's body as the customer read it, with the template's name, as the thread shows it)."""

    written_by: str
    text: str | None = None
    template_name: str | None = None
    agent_user_id: int | None = None

    def columns(self) -> dict[str, Any]:
        text = self.text
        if text is not None and len(text) > LAST_MESSAGE_LENGTH:
            text = text[: LAST_MESSAGE_LENGTH - 1] + "\u2026"
        return {
            "last_message_text": text,
            "last_message_key": fold(text)[:LAST_MESSAGE_KEY_LENGTH] if text else None,
            "last_message_from": self.written_by,
            "last_message_author": self.template_name[:TEMPLATE_NAME_LENGTH] if self.template_name else None,
            "last_message_agent_id": self.agent_user_id,
        }


def note_last_message(conversation: Conversation, last: LastMessage, *, at: datetime) -> None:
    """A message written into a conversation loaded in the session (a customer's message, a reply of
    Meta's AI agent): its last message, and whether the customer waits since `at` (see ENDS_WAITING)."""
    for column, value in last.columns().items():
        setattr(conversation, column, value)
    if last.written_by == FROM_CUSTOMER:
        if conversation.waiting_since is None:
            conversation.waiting_since = at
    elif last.written_by in ENDS_WAITING:
        conversation.waiting_since = None


def conversation_query(*, account_id: int, channel_id: int, phone_number: str) -> Select[Conversation]:
    return (
        select(Conversation)
        .join(Contact, Contact.id == Conversation.contact_id)
        .where(
            Contact.account_id == account_id,
            Contact.phone_number == phone_number,
            Conversation.channel_id == channel_id,
        )
    )


async def find_conversation(
    session: AsyncSession, *, account_id: int, channel_id: int, phone_number: str
) -> Conversation | None:
    query = conversation_query(account_id=account_id, channel_id=channel_id, phone_number=phone_number)
    result: Conversation | None = await session.scalar(query)
    return result


def _insert(session: Session, model: type[Base]):  # type: ignore[no-untyped-def]
    """The dialect's INSERT, which has ON CONFLICT (SQLite and PostgreSQL spell it alike)."""
    insert = postgresql.insert if dialect_name(session) == "postgresql" else sqlite.insert
    return insert(table_of(model))


def _contact_upsert(statement: Any) -> Any:
    """A send's contact: made when new, its id (and number) returned either way."""
    contacts = table_of(Contact)
    return statement.on_conflict_do_update(
        index_elements=[contacts.c.account_id, contacts.c.phone_number],
        set_={"name": func.coalesce(statement.excluded.name, contacts.c.name)},
    ).returning(contacts.c.id, contacts.c.phone_number)


# The columns of the last message a send writes (`LastMessage.columns`).
LAST_MESSAGE_COLUMNS = (
    "last_message_text",
    "last_message_key",
    "last_message_from",
    "last_message_author",
    "last_message_agent_id",
)


def _conversation_upsert(statement: Any) -> Any:
    """A send's conversation: made when new, else given the send's status, time and last message;
    its id returned. A reply ends the customer's waiting (ENDS_WAITING), a template leaves it. A
    send takes the conversation back from Meta's AI agent (API.md section 14; Meta: an app that
    sends while on standby becomes the active handler): new rows get `app` from the column's default."""
    conversations = table_of(Conversation)
    excluded = statement.excluded
    return statement.on_conflict_do_update(
        index_elements=[conversations.c.channel_id, conversations.c.contact_id],
        set_={
            "status": excluded.status,
            "last_activity_at": excluded.last_activity_at,
            "handled_by": HANDLED_BY_APP,
            **{column: excluded[column] for column in LAST_MESSAGE_COLUMNS},
            "waiting_since": case(
                # Written into the SQL (constants of ours): a multi-row statement takes no list parameter.
                (
                    excluded.last_message_from.in_(
                        [literal_column(f"'{by}'") for by in sorted(ENDS_WAITING)]
                    ),
                    null(),
                ),
                else_=conversations.c.waiting_since,
            ),
        },
    ).returning(conversations.c.id, conversations.c.contact_id)


@cache
def _upserts(dialect: str) -> tuple[Any, Any]:
    """The two statements every send runs, built once per dialect; values come at execution, so
    SQLAlchemy's compiled-statement cache serves them."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return _contact_upsert(insert(table_of(Contact))), _conversation_upsert(insert(table_of(Conversation)))


@cache
def contacts_and_conversations() -> Select[Any]:
    """PostgreSQL: both upserts of `_upserts` in one statement (a data-modifying CTE feeds the
    contacts' ids to the conversations' insert), for numbers given as one array: one round trip
    instead of two, and the same text for any number of sends, so it is parsed and planned once.
    Rows: (phone_number, contact id, conversation id); parameters: account_id, channel_id, numbers
    (each once: one statement cannot update a row twice), status, now, and each number's last
    message (`LastMessage.columns`) as one array per column, in the numbers' order."""
    contacts, conversations = table_of(Contact), table_of(Conversation)
    account_id = bindparam("account_id", type_=contacts.c.account_id.type)
    now = bindparam("now", type_=conversations.c.last_activity_at.type)
    arrays = [bindparam("numbers", type_=postgresql.ARRAY(contacts.c.phone_number.type))] + [
        bindparam(column, type_=postgresql.ARRAY(conversations.c[column].type))
        for column in LAST_MESSAGE_COLUMNS
    ]
    # The arrays side by side (unnest of several arrays): a row per number with its last message.
    sends = func.unnest(*arrays).table_valued("number", *LAST_MESSAGE_COLUMNS).render_derived("sends")
    new_contacts = select(account_id, sends.c.number, null(), now)
    contact = _contact_upsert(
        postgresql.insert(contacts).from_select(
            ["account_id", "phone_number", "name", "created_at"], new_contacts
        )
    ).cte("contact")
    new_conversations = select(
        account_id,
        bindparam("channel_id", type_=conversations.c.channel_id.type),
        contact.c.id,
        bindparam("status", type_=conversations.c.status.type),
        now,
        now,
        *(sends.c[column] for column in LAST_MESSAGE_COLUMNS),
    ).join_from(contact, sends, sends.c.number == contact.c.phone_number)
    conversation = _conversation_upsert(
        postgresql.insert(conversations).from_select(
            [
                "account_id",
                "channel_id",
                "contact_id",
                "status",
                "last_activity_at",
                "created_at",
                *LAST_MESSAGE_COLUMNS,
            ],
            new_conversations,
        )
    ).cte("conversation")
    return select(
        contact.c.phone_number, contact.c.id.label("contact_id"), conversation.c.id.label("conversation_id")
    ).join_from(contact, conversation, conversation.c.contact_id == contact.c.id)


def get_or_create_conversation(
    session: Session,
    *,
    account_id: int,
    channel_id: int,
    contact_id: int,
    initial_status: ConversationStatus,
) -> tuple[Conversation, bool]:
    """The conversation of this channel with this contact, and whether it was created just now.

    The insert ignores a conflict, so two writers creating the same conversation at once both succeed.
    """
    now = utcnow()
    inserted = (
        session.connection()
        .execute(
            _insert(session, Conversation)
            .values(
                account_id=account_id,
                channel_id=channel_id,
                contact_id=contact_id,
                status=initial_status.value,
                last_activity_at=now,
                created_at=now,
            )
            .on_conflict_do_nothing()
            .returning(table_of(Conversation).c.id)  # a row only when inserted (rowcount is not portable)
        )
        .scalar_one_or_none()
    )
    conversation = session.scalar(
        select(Conversation).where(
            Conversation.channel_id == channel_id, Conversation.contact_id == contact_id
        )
    )
    assert conversation is not None  # inserted or already there
    return conversation, inserted is not None


def insert_customer_id(
    session: Session, *, account_id: int, user_id: str, parent_user_id: str | None, contact_id: int
) -> bool:
    """Bind a user id to a contact; False when the user id was bound already (by another writer)."""
    inserted = (
        session.connection()
        .execute(
            _insert(session, CustomerId)
            .values(
                account_id=account_id,
                user_id=user_id,
                parent_user_id=parent_user_id,
                contact_id=contact_id,
                created_at=utcnow(),
            )
            .on_conflict_do_nothing()
            .returning(table_of(CustomerId).c.id)
        )
        .scalar_one_or_none()
    )
    return inserted is not None


def insert_customer_ids(session: Session, rows: list[dict[str, Any]]) -> set[str]:
    """Bind user ids to contacts (rows of account_id, user_id, parent_user_id, contact_id) in one
    statement; returns the user ids bound now (the others were bound already)."""
    now = utcnow()
    statement = (
        _insert(session, CustomerId).on_conflict_do_nothing().returning(table_of(CustomerId).c.user_id)
    )
    result = session.connection().execute(statement, [{**row, "created_at": now} for row in rows])
    return set(result.scalars())


async def find_customer(
    session: AsyncSession, *, account_id: int, user_id: str
) -> tuple[int, str | None, str | None] | None:
    """The contact a user id names, its number and the user id the customer moved to (None when
    unknown): (contact id, phone number, replaced by)."""
    row = (
        await session.execute(
            select(Contact.id, Contact.phone_number, CustomerId.replaced_by)
            .join(CustomerId, CustomerId.contact_id == Contact.id)
            .where(CustomerId.account_id == account_id, CustomerId.user_id == user_id)
        )
    ).one_or_none()
    return (row[0], row[1], row[2]) if row else None


async def find_contact_conversation(
    session: AsyncSession, *, channel_id: int, contact_id: int
) -> Conversation | None:
    found: Conversation | None = await session.scalar(
        select(Conversation).where(
            Conversation.channel_id == channel_id, Conversation.contact_id == contact_id
        )
    )
    return found


def contacts_of_user_ids(
    session: Session, *, account_id: int, user_ids: list[str], parent_user_ids: dict[str, str | None]
) -> dict[str, int]:
    """The contact of each user id, a contact without number made for each one never seen: for
    sends to user ids nobody has learned a number for. Two statements when all are known."""
    known = dict(
        session.execute(
            select(CustomerId.user_id, CustomerId.contact_id).where(
                CustomerId.account_id == account_id, CustomerId.user_id.in_(user_ids)
            )
        ).all()
    )
    for user_id in user_ids:
        if user_id in known:
            continue
        contact_id = (
            session.connection()
            .execute(
                _insert(session, Contact)
                .values(account_id=account_id, phone_number=None, created_at=utcnow())
                .returning(table_of(Contact).c.id)
            )
            .scalar_one()
        )
        if insert_customer_id(
            session,
            account_id=account_id,
            user_id=user_id,
            parent_user_id=parent_user_ids.get(user_id),
            contact_id=contact_id,
        ):
            known[user_id] = contact_id
            continue
        # Another writer bound it meanwhile: its contact it is.
        session.connection().execute(table_of(Contact).delete().where(table_of(Contact).c.id == contact_id))
        winner = session.scalar(
            select(CustomerId.contact_id).where(
                CustomerId.account_id == account_id, CustomerId.user_id == user_id
            )
        )
        assert winner is not None
        known[user_id] = winner
    return known


def set_marketing_preferences(
    session: Session, *, channel_id: int, changes: list[tuple[int, bool, datetime]]
) -> None:
    """Record (contact id, stopped, Meta's time) for the channel; a choice older than the one recorded
    (a webhook delivered late) changes nothing."""
    table = table_of(MarketingPreference)
    statement = _insert(session, MarketingPreference)
    statement = statement.on_conflict_do_update(
        index_elements=[table.c.channel_id, table.c.contact_id],
        set_={"stopped": statement.excluded.stopped, "changed_at": statement.excluded.changed_at},
        where=table.c.changed_at <= statement.excluded.changed_at,
    )
    rows = [
        {"channel_id": channel_id, "contact_id": contact_id, "stopped": stopped, "changed_at": at}
        for contact_id, stopped, at in changes
    ]
    session.connection().execute(statement, rows)


async def marketing_stopped(
    session: AsyncSession,
    *,
    account_id: int,
    channel_id: int,
    phone_numbers: list[str] = [],  # noqa: B006 (never mutated)
    user_ids: list[str] = [],  # noqa: B006
) -> set[str]:
    """Which of these numbers and user ids stopped marketing messages from the channel."""
    stopped: set[str] = set()
    base = select(MarketingPreference.contact_id).where(
        MarketingPreference.channel_id == channel_id, MarketingPreference.stopped.is_(True)
    )
    if phone_numbers:
        rows = await session.execute(
            select(Contact.phone_number).where(
                Contact.account_id == account_id,
                Contact.phone_number.in_(phone_numbers),
                Contact.id.in_(base),
            )
        )
        stopped |= {number for (number,) in rows if number}
    if user_ids:
        rows = await session.execute(
            select(CustomerId.user_id).where(
                CustomerId.account_id == account_id,
                CustomerId.user_id.in_(user_ids),
                CustomerId.contact_id.in_(base),
            )
        )
        stopped |= {user_id for (user_id,) in rows if user_id}
    return stopped


async def open_windows(
    session: AsyncSession, *, account_id: int, channel_id: int, phone_numbers: list[str], since: datetime
) -> set[str]:
    """Which of these numbers wrote to the channel after `since` (their window is open)."""
    rows = await session.execute(
        select(Contact.phone_number)
        .join(Conversation, Conversation.contact_id == Contact.id)
        .where(
            Contact.account_id == account_id,
            Contact.phone_number.in_(phone_numbers),
            Conversation.channel_id == channel_id,
            Conversation.last_customer_message_at > since,
        )
    )
    return {number for (number,) in rows if number}


def contacts_of_numbers(session: Session, *, account_id: int, phone_numbers: list[str]) -> dict[str, int]:
    """The contact of each number, made when new: one statement for any number of them (SQLAlchemy
    sends many rows as one multi-row statement)."""
    contact_upsert = _upserts(dialect_name(session))[0]
    now = utcnow()
    rows = [
        {"account_id": account_id, "phone_number": number, "name": None, "created_at": now}
        for number in phone_numbers
    ]
    return {number: contact_id for contact_id, number in session.connection().execute(contact_upsert, rows)}


def touch_after_sends(
    session: Session,
    *,
    account_id: int,
    channel_id: int,
    last_messages: dict[int, LastMessage],
    status: ConversationStatus,
) -> dict[int, int]:
    """Give each contact's conversation on the channel its status after an API send (made when new)
    and its last message (contact id -> the last send to them); returns contact id -> conversation
    id. One statement for any number of them."""
    now = utcnow()
    conversation_upsert = _upserts(dialect_name(session))[1]
    rows = [
        {
            "account_id": account_id,
            "channel_id": channel_id,
            "contact_id": contact_id,
            "status": status.value,
            "last_activity_at": now,
            "created_at": now,
            **last.columns(),
        }
        for contact_id, last in last_messages.items()
    ]
    # Rows come back in no promised order: matched by contact.
    return {
        contact_id: conversation_id
        for conversation_id, contact_id in session.connection().execute(conversation_upsert, rows)
    }


def statuses_before(session: Session, *, channel_id: int, contact_ids: list[int]) -> dict[int, str]:
    """The current status of each contact's conversation on the channel (those without one are left out)."""
    rows = session.execute(
        select(Conversation.contact_id, Conversation.status).where(
            Conversation.channel_id == channel_id, Conversation.contact_id.in_(contact_ids)
        )
    )
    return {contact_id: ConversationStatus(status).value for contact_id, status in rows}


def first_user_id(session: Session, contact_id: int) -> str | None:
    """One current user id of the contact (customers reached through one business have one; one
    replaced by a newer is not current)."""
    found: str | None = session.scalar(
        select(func.min(CustomerId.user_id)).where(
            CustomerId.contact_id == contact_id, CustomerId.replaced_by.is_(None)
        )
    )
    return found


def set_status(session: Session, *, conversation_id: int, status: ConversationStatus) -> Conversation:
    conversation = session.get_one(Conversation, conversation_id)
    conversation.status = status
    return detached(session, conversation)


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
