"""The reads about customers that sends and Meta's webhooks ask: a number's or a contact's
conversation, the contact of a user id, who stopped marketing messages, whose window is open."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from wagate.conversations.models import Contact, Conversation, CustomerId, MarketingPreference


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
