"""A customer's user id changes (Meta's `user_changed_user_id` system message, API.md section 14).

The customer stays one contact: the new user id names the contact the old one named, so the
conversation, its window and its history stay one, and the old id's row remembers the new one
(`customer_ids.replaced_by`) so that a send by the old id goes to the new one.

When the new id already named a contact of its own (the customer wrote under it before the system
message came), the two contacts are merged into the old id's: its conversations and messages move
over (two conversations on one channel become one, the newer window kept), then the new id's
contact is deleted. Rare, so a handful of plain statements.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session

from wagate.conversations.last_message import LAST_MESSAGE_COLUMNS
from wagate.conversations.models import (
    Contact,
    Conversation,
    ConversationStatus,
    CustomerId,
    MarketingPreference,
)
from wagate.conversations.repository.writes import insert_customer_id
from wagate.conversations.search import contact_key

# Moves the messages of one conversation (the first id) into another (the second): the messages
# domain's rows, which a merge of two contacts carries over (wagate.messages.repository).
MoveMessages = Callable[[Session, int, int], None]


def change_user_id(
    session: Session,
    *,
    account_id: int,
    previous: str,
    current: str,
    move_messages: MoveMessages,
    parent_user_id: str | None = None,
) -> int | None:
    """Move the account's customer from `previous` to `current`; returns their contact (None when
    neither id is known: there is nobody to move)."""
    named = dict(
        session.execute(
            select(CustomerId.user_id, CustomerId.contact_id).where(
                CustomerId.account_id == account_id, CustomerId.user_id.in_([previous, current])
            )
        ).all()
    )
    contact_id = named.get(previous)
    if contact_id is None:
        return named.get(current)
    absorbed = named.get(current)
    if absorbed is None and not insert_customer_id(
        session, account_id=account_id, user_id=current, parent_user_id=parent_user_id, contact_id=contact_id
    ):
        # Another writer bound it meanwhile (PostgreSQL, two workers): it is that contact.
        absorbed = session.scalar(
            select(CustomerId.contact_id).where(
                CustomerId.account_id == account_id, CustomerId.user_id == current
            )
        )
    if absorbed is not None and absorbed != contact_id:
        _merge_contacts(session, keep=contact_id, absorb=absorbed, move_messages=move_messages)
    # Sends by the old id, and by ids it had replaced, go to the new one; the new one is current.
    session.execute(
        update(CustomerId)
        .where(
            CustomerId.account_id == account_id,
            or_(CustomerId.user_id == previous, CustomerId.replaced_by == previous),
        )
        .values(replaced_by=current)
    )
    session.execute(
        update(CustomerId)
        .where(CustomerId.account_id == account_id, CustomerId.user_id == current)
        .values(replaced_by=None)
    )
    return contact_id


def _merge_contacts(session: Session, *, keep: int, absorb: int, move_messages: MoveMessages) -> None:
    """`absorb` becomes part of `keep`: its conversations (merged per channel), user ids, marketing
    choices, and its number and profile when `keep` has none; then it is deleted."""
    session.flush()
    of_contact = select(Conversation).where(Conversation.contact_id == keep)
    kept = {conversation.channel_id: conversation for conversation in session.scalars(of_contact)}
    for moving in session.scalars(select(Conversation).where(Conversation.contact_id == absorb)).all():
        target = kept.get(moving.channel_id)
        if target is None:
            moving.contact_id = keep
            continue
        move_messages(session, moving.id, target.id)
        times = [t for t in (target.last_customer_message_at, moving.last_customer_message_at) if t]
        target.last_customer_message_at = max(times) if times else None
        if moving.last_activity_at > target.last_activity_at:  # its last message is the later one
            for column in LAST_MESSAGE_COLUMNS:
                setattr(target, column, getattr(moving, column))
        waiting = [t for t in (target.waiting_since, moving.waiting_since) if t]
        target.waiting_since = min(waiting) if waiting else None  # unanswered in either: waits
        target.last_activity_at = max(target.last_activity_at, moving.last_activity_at)
        if target.status is ConversationStatus.resolved:
            target.status = moving.status  # a conversation someone must answer stays in sight
        session.delete(moving)
    # Written before `absorb` goes: deleting a contact deletes its conversations (ON DELETE CASCADE).
    session.flush()
    session.execute(update(CustomerId).where(CustomerId.contact_id == absorb).values(contact_id=keep))
    chosen = select(MarketingPreference.channel_id).where(MarketingPreference.contact_id == keep)
    session.execute(
        delete(MarketingPreference).where(
            MarketingPreference.contact_id == absorb, MarketingPreference.channel_id.in_(chosen)
        )
    )
    session.execute(
        update(MarketingPreference).where(MarketingPreference.contact_id == absorb).values(contact_id=keep)
    )
    survivor, gone = session.get_one(Contact, keep), session.get_one(Contact, absorb)
    number = gone.phone_number if survivor.phone_number is None else None
    survivor.name = survivor.name or gone.name
    survivor.username = survivor.username or gone.username
    survivor.search_key = contact_key(survivor.name, survivor.username)
    session.delete(gone)
    session.flush()  # the number is free only once its contact is gone (one number, one contact)
    if number is not None:
        survivor.phone_number = number
        session.flush()
