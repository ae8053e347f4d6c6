"""Conversations and the customer's 24-hour window: the rules, and the status change agents make.

The conversations' one door for other parts: the `name as name` imports are published, so that no
other domain and no page imports the conversations' repository: the list's row and its "Needs reply"
view (the dashboard), and what other domains' units of work do to contacts and conversations in their
own transaction (a send's contact and conversation: messages.send_rows and messages.repository; a
customer's message or a reply of Meta's AI agent: messages.customer_messages and messages.standby).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.accounts.auth import Principal
from wagate.channels.service import channel_for_caller, channel_for_member, member_channels
from wagate.conversations.models import Contact, Conversation, ConversationStatus, Window
from wagate.conversations.repository.conversation_list import NEEDS_REPLY as NEEDS_REPLY
from wagate.conversations.repository.conversation_list import ConversationRow as ConversationRow
from wagate.conversations.repository.conversation_list import (
    conversation_row,
    count_conversations,
    list_conversations,
)
from wagate.conversations.repository.customer_lookups import (
    find_contact_conversation,
    find_conversation,
    find_customer,
    marketing_stopped,
    open_windows,
)
from wagate.conversations.repository.writes import contacts_and_conversations as contacts_and_conversations
from wagate.conversations.repository.writes import contacts_of_numbers as contacts_of_numbers
from wagate.conversations.repository.writes import contacts_of_user_ids as contacts_of_user_ids
from wagate.conversations.repository.writes import first_user_id, set_status
from wagate.conversations.repository.writes import get_or_create_conversation as get_or_create_conversation
from wagate.conversations.repository.writes import set_marketing_preferences as set_marketing_preferences
from wagate.conversations.repository.writes import statuses_before as statuses_before
from wagate.conversations.repository.writes import touch_after_sends as touch_after_sends
from wagate.conversations.search import QUERY_LENGTH
from wagate.core.db import utcnow
from wagate.core.errors import ConversationNotFound, MarketingPreferenceStopped
from wagate.core.live import LiveChange, LiveKind, record_live
from wagate.events.models import EventKind
from wagate.events.publish import ConversationChange, publish_conversation_changes
from wagate.events.subscriptions import current_subscriptions
from wagate.runtime.gateway import Gateway

WINDOW = timedelta(hours=24)


def window_of(last_customer_message_at: datetime | None) -> Window:
    expires = last_customer_message_at + WINDOW if last_customer_message_at else None
    return Window(last_customer_message_at, expires, utcnow())


@dataclass(frozen=True)
class Recipient:
    """Whom a send goes to: a number, or a business-scoped user id with the contact and number learned
    for it when they are known (API.md section 13)."""

    phone_number: str | None
    user_id: str | None = None
    contact_id: int | None = None  # the user id's contact, when the gateway has seen the user id

    @property
    def address(self) -> str:
        """What the Cloud API request names: the user id when the caller gave one (`recipient`)."""
        address = self.user_id or self.phone_number
        assert address is not None  # one of the two, always
        return address


async def recipient_for(
    session: AsyncSession, *, account_id: int, phone_number: str | None, user_id: str | None
) -> Recipient:
    """A send's recipient: a user id's contact and number are looked up (one query); a number is as given.
    A user id the customer moved away from (`user_changed_user_id`) is sent to the one they moved to."""
    if user_id is None:
        return Recipient(phone_number)
    found = await find_customer(session, account_id=account_id, user_id=user_id)
    if found is None:
        return Recipient(None, user_id)
    contact_id, number, replaced_by = found
    return Recipient(number, replaced_by or user_id, contact_id)


async def window_for(
    session: AsyncSession, *, account_id: int, channel_id: int, recipient: Recipient | str
) -> Window:
    """The customer's window on the channel (closed when they never wrote). A user id learned for a
    number has the number's window: they are one contact."""
    if isinstance(recipient, str):
        recipient = Recipient(recipient)
    if recipient.contact_id is not None:
        conversation = await find_contact_conversation(
            session, channel_id=channel_id, contact_id=recipient.contact_id
        )
    elif recipient.phone_number is not None:
        conversation = await find_conversation(
            session, account_id=account_id, channel_id=channel_id, phone_number=recipient.phone_number
        )
    else:
        conversation = None  # a user id never seen has never written
    return window_of(conversation.last_customer_message_at if conversation else None)


async def refuse_stopped_marketing(
    session: AsyncSession, account_id: int, channel_id: int, recipient: Recipient
) -> None:
    """422 `marketing_preference_stopped` when the customer stopped marketing messages from the channel."""
    stopped = await marketing_stopped(
        session,
        account_id=account_id,
        channel_id=channel_id,
        phone_numbers=[recipient.phone_number] if recipient.phone_number else [],
        user_ids=[recipient.user_id] if recipient.user_id else [],
    )
    if stopped:
        field = "user_id" if recipient.user_id else "phone_number"
        raise MarketingPreferenceStopped(details=[{"field": field, "issue": "stopped marketing messages"}])


async def stopped_marketing_of(
    session: AsyncSession, *, account_id: int, channel_id: int, phone_numbers: list[str]
) -> set[str]:
    """Which of these numbers stopped marketing messages from the channel (a bulk send skips them)."""
    return await marketing_stopped(
        session, account_id=account_id, channel_id=channel_id, phone_numbers=phone_numbers
    )


async def numbers_in_window(
    session: AsyncSession, *, account_id: int, channel_id: int, phone_numbers: list[str]
) -> set[str]:
    """Which of these numbers wrote to the channel within the last 24 hours (their window is open)."""
    return await open_windows(
        session,
        account_id=account_id,
        channel_id=channel_id,
        phone_numbers=phone_numbers,
        since=utcnow() - WINDOW,
    )


def status_after_send(requested: ConversationStatus | None) -> ConversationStatus:
    """Spec section 3: an API send resolves the conversation unless `conversation_status` says otherwise."""
    return requested or ConversationStatus.resolved


async def change_conversation_status(
    gateway: Gateway, *, principal: Principal, conversation_id: int, status: ConversationStatus
) -> Conversation:
    """Resolve, reopen or set pending a conversation of an inbox the caller is a member of (404 for
    another account's or an unknown one, 403 for an inbox the caller is not a member of)."""

    conversation = await conversation_for(gateway, principal=principal, conversation_id=conversation_id)
    change = LiveChange(
        principal.account_id,
        conversation.channel_id,
        conversation_id,
        LiveKind.conversation,
        conversation_status=status.value,
    )

    subscriptions = await current_subscriptions(gateway.caches)

    def unit(session: Session) -> Conversation:
        previous = session.get_one(Conversation, conversation_id).status
        changed = set_status(session, conversation_id=conversation_id, status=status)
        record_live(session, [change])
        contact = session.get_one(Contact, changed.contact_id)
        # The same event an API send or a customer's message fires (none when nothing changed).
        publish_conversation_changes(
            session,
            [
                ConversationChange(
                    changed.account_id,
                    conversation_id,
                    changed.channel_id,
                    contact.phone_number,
                    previous.value,
                    status.value,
                    user_id=first_user_id(session, contact.id),
                )
            ],
            subscriptions,
        )
        return changed

    changed: Conversation = await gateway.db.write(unit)
    if subscriptions.webhooks(changed.account_id, EventKind.conversation_status_changed):
        gateway.dispatcher.wake_events()
    return changed


PAGE_SIZE = 50


@dataclass(frozen=True)
class ListedConversation:
    """A row of the list with what it shows of the customer's state: the window, and how long the
    customer has waited for an answer (None: answered; see `ENDS_WAITING`)."""

    row: ConversationRow
    window: Window
    waiting_seconds: int | None


@dataclass(frozen=True)
class ConversationPage:
    listed: list[ListedConversation]
    # (last_activity_at, id) of the last row when there are more: the next page starts after it;
    # in "Needs reply" (waiting_since, id).
    next_before: tuple[datetime, int] | None
    # How many conversations each view holds (each status, and NEEDS_REPLY) for the same inboxes
    # and search.
    counts: dict[str, int]


async def conversations_for(
    gateway: Gateway,
    *,
    principal: Principal,
    status: ConversationStatus | str,
    channel_id: int | None = None,
    search: str | None = None,
    before: tuple[datetime, int] | None = None,
) -> ConversationPage:
    """A page of the conversations of the caller's inboxes (of one inbox: 404 / 403 as for any use of
    a channel), newest activity first, with the counts of every view; `status` NEEDS_REPLY: those
    whose customer waits for an answer, of any status, longest waiting first. Three statements: the
    inboxes, the page, the counts."""
    search = search.strip()[:QUERY_LENGTH] if search and search.strip() else None
    async with gateway.db.read() as session:
        if channel_id is not None:
            channel_ids = [(await channel_for_member(session, principal=principal, channel_id=channel_id)).id]
        else:
            channel_ids = [channel.id for channel in await member_channels(session, principal=principal)]
        rows = await list_conversations(
            session,
            account_id=principal.account_id,
            channel_ids=channel_ids,
            status=status,
            search=search,
            before=before,
            limit=PAGE_SIZE + 1,
        )
        counts = await count_conversations(
            session, account_id=principal.account_id, channel_ids=channel_ids, search=search
        )
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    now = utcnow()
    listed = [
        ListedConversation(
            row,
            window_of(row.last_customer_message_at),
            max(0, int((now - row.waiting_since).total_seconds())) if row.waiting_since else None,
        )
        for row in rows
    ]
    next_before = None
    if more:
        last = rows[-1]
        at = last.waiting_since if status == NEEDS_REPLY else last.last_activity_at
        next_before = (at or last.last_activity_at, last.id)
    return ConversationPage(listed, next_before, counts)


async def conversation_for(
    gateway: Gateway, *, principal: Principal, conversation_id: int
) -> ConversationRow:
    """A conversation of an inbox the caller is a member of (404 for another account's or an unknown
    one, 403 for another inbox's)."""
    async with gateway.db.read() as session:
        row = await conversation_row(
            session, account_id=principal.account_id, conversation_id=conversation_id
        )
    if row is None:
        raise ConversationNotFound()
    await channel_for_caller(gateway.caches, principal, row.channel_id)
    return row
