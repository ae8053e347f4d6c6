"""Contacts, conversations and the customer's 24-hour window."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Select, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.conversations.models import Contact, Conversation, ConversationStatus
from wagate.db import dialect_name, table_of, utcnow

WINDOW = timedelta(hours=24)


@dataclass(frozen=True)
class Window:
    last_customer_message_at: datetime | None
    expires_at: datetime | None
    now: datetime

    @property
    def open(self) -> bool:
        return self.expires_at is not None and self.expires_at > self.now

    @property
    def seconds_remaining(self) -> int:
        if not self.open or self.expires_at is None:
            return 0
        return int((self.expires_at - self.now).total_seconds())


def window_of(last_customer_message_at: datetime | None) -> Window:
    expires = last_customer_message_at + WINDOW if last_customer_message_at else None
    return Window(last_customer_message_at, expires, utcnow())


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


def _insert_ignoring_conflict(session: Session, table: type[Contact] | type[Conversation]):  # type: ignore[no-untyped-def]
    insert = postgresql.insert if dialect_name(session) == "postgresql" else sqlite.insert
    return insert(table).on_conflict_do_nothing()


def get_or_create_conversation(
    session: Session,
    *,
    account_id: int,
    channel_id: int,
    phone_number: str,
    initial_status: ConversationStatus,
    contact_name: str | None = None,
) -> Conversation:
    """The conversation of this channel with this number, created with its contact when new.

    Inserts ignore a conflict, so two writers creating the same contact at once both succeed.
    """
    query = conversation_query(account_id=account_id, channel_id=channel_id, phone_number=phone_number)
    conversation = session.scalar(query)
    if conversation is not None:
        return conversation
    now = utcnow()
    session.execute(
        _insert_ignoring_conflict(session, Contact).values(
            account_id=account_id, phone_number=phone_number, name=contact_name, created_at=now
        )
    )
    contact_id = session.scalar(
        select(Contact.id).where(Contact.account_id == account_id, Contact.phone_number == phone_number)
    )
    session.execute(
        _insert_ignoring_conflict(session, Conversation).values(
            account_id=account_id,
            channel_id=channel_id,
            contact_id=contact_id,
            status=initial_status.value,
            last_activity_at=now,
            created_at=now,
        )
    )
    conversation = session.scalar(query)
    assert conversation is not None  # inserted or already there
    return conversation


def touch_after_send(
    session: Session, *, account_id: int, channel_id: int, phone_number: str, status: ConversationStatus
) -> int:
    """Give the conversation its status after an API send; returns its id. One statement when it exists."""
    now = utcnow()
    conversations = table_of(Conversation)
    contact_id = (
        select(Contact.id).where(Contact.account_id == account_id, Contact.phone_number == phone_number)
    ).scalar_subquery()
    conversation_id: int | None = session.execute(
        conversations.update()
        .where(conversations.c.channel_id == channel_id, conversations.c.contact_id == contact_id)
        .values(status=status.value, last_activity_at=now)
        .returning(conversations.c.id)
    ).scalar()
    if conversation_id is None:
        conversation = get_or_create_conversation(
            session,
            account_id=account_id,
            channel_id=channel_id,
            phone_number=phone_number,
            initial_status=status,
        )
        conversation.status = status
        conversation_id = conversation.id
    return conversation_id


def status_after_send(requested: ConversationStatus | None) -> ConversationStatus:
    """Spec section 3: an API send resolves the conversation unless `conversation_status` says otherwise."""
    return requested or ConversationStatus.resolved
