"""The SQL of contacts and conversations: the upserts every send and customer message runs, and reads."""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.conversations.models import CONTACT_NAME_LENGTH, Contact, Conversation, ConversationStatus
from wagate.db import detached, dialect_name, table_of, utcnow


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


def _insert(session: Session, model: type[Contact] | type[Conversation]):  # type: ignore[no-untyped-def]
    """The dialect's INSERT, which has ON CONFLICT (SQLite and PostgreSQL spell it alike)."""
    insert = postgresql.insert if dialect_name(session) == "postgresql" else sqlite.insert
    return insert(table_of(model))


@cache
def _upserts(dialect: str) -> tuple[Any, Any]:
    """The two statements every send runs, built once per dialect; values come at execution, so
    SQLAlchemy's compiled-statement cache serves them."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    contacts, conversations = table_of(Contact), table_of(Conversation)
    contact = insert(contacts)
    conversation = insert(conversations)
    contact_upsert = contact.on_conflict_do_update(
        index_elements=[contacts.c.account_id, contacts.c.phone_number],
        set_={"name": func.coalesce(contact.excluded.name, contacts.c.name)},
    ).returning(contacts.c.id, contacts.c.phone_number)
    conversation_upsert = conversation.on_conflict_do_update(
        index_elements=[conversations.c.channel_id, conversations.c.contact_id],
        set_={
            "status": conversation.excluded.status,
            "last_activity_at": conversation.excluded.last_activity_at,
        },
    ).returning(conversations.c.id, conversations.c.contact_id)
    return contact_upsert, conversation_upsert


def upsert_contact(session: Session, *, account_id: int, phone_number: str, name: str | None = None) -> int:
    """The contact's id, the contact made when new; one statement either way."""
    statement = _upserts(dialect_name(session))[0]
    # The profile name is the customer's own choice, shown as Meta sends it, cut to what the column holds.
    name = name[:CONTACT_NAME_LENGTH] if name else name
    params = {"account_id": account_id, "phone_number": phone_number, "name": name, "created_at": utcnow()}
    contact_id: int = session.connection().execute(statement, params).one()[0]
    return contact_id


def get_or_create_conversation(
    session: Session,
    *,
    account_id: int,
    channel_id: int,
    phone_number: str,
    initial_status: ConversationStatus,
    contact_name: str | None = None,
) -> tuple[Conversation, bool]:
    """The conversation of this channel with this number, and whether it was created just now (with
    its contact, when new).

    Inserts ignore a conflict, so two writers creating the same contact at once both succeed.
    """
    contact_id = upsert_contact(session, account_id=account_id, phone_number=phone_number, name=contact_name)
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


def touch_after_sends(
    session: Session,
    *,
    account_id: int,
    channel_id: int,
    phone_numbers: list[str],
    status: ConversationStatus,
) -> dict[str, int]:
    """Give each number's conversation its status after an API send; returns number -> conversation id.

    Two statements for any number of them (SQLAlchemy sends many rows as one multi-row statement).
    """
    now = utcnow()
    contact_upsert, conversation_upsert = _upserts(dialect_name(session))
    connection = session.connection()
    contact_rows = [
        {"account_id": account_id, "phone_number": number, "name": None, "created_at": now}
        for number in phone_numbers
    ]
    contact_of = {
        number: contact_id for contact_id, number in connection.execute(contact_upsert, contact_rows)
    }
    conversation_rows = [
        {
            "account_id": account_id,
            "channel_id": channel_id,
            "contact_id": contact_of[number],
            "status": status.value,
            "last_activity_at": now,
            "created_at": now,
        }
        for number in phone_numbers
    ]
    # Rows come back in no promised order: matched by contact.
    conversation_of = dict(
        (contact_id, conversation_id)
        for conversation_id, contact_id in connection.execute(conversation_upsert, conversation_rows)
    )
    return {number: conversation_of[contact_of[number]] for number in phone_numbers}


def statuses_before(
    session: Session, *, account_id: int, channel_id: int, phone_numbers: list[str]
) -> dict[str, str]:
    """The current status of each number's conversation on the channel (numbers without one are left out)."""
    rows = session.execute(
        select(Contact.phone_number, Conversation.status)
        .join(Conversation, Conversation.contact_id == Contact.id)
        .where(
            Contact.account_id == account_id,
            Contact.phone_number.in_(phone_numbers),
            Conversation.channel_id == channel_id,
        )
    )
    return {number: ConversationStatus(status).value for number, status in rows}


async def conversation_by_id(
    session: AsyncSession, *, account_id: int, conversation_id: int
) -> Conversation | None:
    found: Conversation | None = await session.scalar(
        select(Conversation).where(Conversation.id == conversation_id, Conversation.account_id == account_id)
    )
    return found


def set_status(session: Session, *, conversation_id: int, status: ConversationStatus) -> Conversation:
    conversation = session.get_one(Conversation, conversation_id)
    conversation.status = status
    return detached(session, conversation)
