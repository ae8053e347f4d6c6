"""The writes of contacts and conversations in the writer's session: the upserts every send and
customer message runs, user ids bound to contacts, marketing choices, a conversation's status."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Select, bindparam, case, func, literal_column, null, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from wagate.conversations.last_message import ENDS_WAITING, LAST_MESSAGE_COLUMNS, LastMessage
from wagate.conversations.models import (
    HANDLED_BY_APP,
    Contact,
    Conversation,
    ConversationStatus,
    CustomerId,
    MarketingPreference,
)
from wagate.core.db import dialect_name, utcnow
from wagate.core.tables import Base, table_of
from wagate.core.units import detached


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
