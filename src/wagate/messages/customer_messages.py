"""What customers send through Meta's webhooks: their messages, into their conversations (opening the
24-hour window), and their marketing choices."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from wagate.channels.models import Channel
from wagate.conversations.customers import Customers, phone_of_wa_id
from wagate.conversations.last_message import FROM_CUSTOMER, LastMessage, note_last_message
from wagate.conversations.models import HANDLED_BY_AGENT, HANDLED_BY_APP, ConversationStatus
from wagate.conversations.service import get_or_create_conversation, set_marketing_preferences
from wagate.core.db import utcnow
from wagate.core.live import LiveChange, LiveKind, record_live
from wagate.events.publish import ConversationChange, publish_conversation_changes
from wagate.events.subscriptions import Subscriptions
from wagate.messages.events import publish_messages_created
from wagate.messages.models import Direction, Message, MessageStatus
from wagate.messages.standby import received_message
from wagate.whatsapp.payloads import InboundMessage, Preference, PreferenceUpdate


def store_inbound(
    session: Session,
    *,
    channel: Channel,
    inbound: list[InboundMessage],
    customers: Customers,
    subscriptions: Subscriptions | None = None,
) -> int:
    """A customer's messages: into the conversation, opening the 24-hour window and the conversation.
    A customer known by user id alone (a username) is the number's customer when the number was
    learned for it (`customers`, from `learn_customers`). Returns how many events it wrote about them.

    A message on `standby` (API.md section 14) is one Meta's AI agent answers: it renews the window
    like any, but the conversation is the agent's, stays as it is (a new one starts resolved) and
    plays no sound. One on `messages` is the app's again: Meta routes a conversation's messages to
    whoever holds it, and a release by the agent sends no handover."""
    known = set(
        session.scalars(
            select(Message.upstream_message_id).where(
                Message.upstream_message_id.in_([m.wamid for m in inbound])
            )
        )
    )
    stored: list[tuple[Message, str]] = []
    handled_by: dict[int, str] = {}
    conversation_changes: list[ConversationChange] = []
    live: list[LiveChange] = []
    for item in inbound:
        if item.wamid in known:
            continue  # Meta delivers webhooks at least once
        known.add(item.wamid)
        phone = phone_of_wa_id(item.from_) if item.from_ else None
        contact_id = customers.contact_of(phone_number=phone, user_id=item.user_id)
        assert contact_id is not None  # learn_customers saw every message's customer
        phone = customers.phone_of.get(contact_id, phone)
        conversation, created = get_or_create_conversation(
            session,
            account_id=channel.account_id,
            channel_id=channel.id,
            contact_id=contact_id,
            initial_status=ConversationStatus.resolved if item.standby else ConversationStatus.open,
        )
        previous = None if created else conversation.status.value
        conversation.handled_by = HANDLED_BY_AGENT if item.standby else HANDLED_BY_APP
        if conversation.status is ConversationStatus.resolved and not item.standby:
            conversation.status = ConversationStatus.open
        conversation_changes.append(
            ConversationChange(
                channel.account_id,
                conversation.id,
                channel.id,
                phone,
                previous,
                conversation.status.value,
                user_id=item.user_id,
            )
        )
        last = conversation.last_customer_message_at
        conversation.last_customer_message_at = item.timestamp if last is None else max(last, item.timestamp)
        conversation.last_activity_at = utcnow()
        text = item.text if item.text is not None else f"[{item.type}]"
        # The list's row and "waiting since", in the same UPDATE as the window (the flush below).
        note_last_message(conversation, LastMessage(FROM_CUSTOMER, text), at=item.timestamp)
        message = received_message(
            channel,
            conversation.id,
            direction=Direction.inbound,
            status=MessageStatus.delivered,
            wamid=item.wamid,
            at=item.timestamp,
            text=text,
            phone_number=phone,
            user_id=item.user_id,
        )
        session.add(message)
        stored.append((message, conversation.status.value))
        handled_by[conversation.id] = conversation.handled_by
        live.append(
            LiveChange(
                channel.account_id,
                channel.id,
                conversation.id,
                LiveKind.message,
                # What the dashboard plays its sound for: not a message Meta's agent answers.
                inbound=not item.standby,
                conversation_status=conversation.status.value,
                message_id=message.id,
            )
        )
    session.flush()
    record_live(session, live)
    return publish_messages_created(session, stored, handled_by=handled_by) + publish_conversation_changes(
        session, conversation_changes
    )


def record_preferences(
    session: Session, channel_id: int, preferences: tuple[PreferenceUpdate, ...], customers: Customers
) -> None:
    changes = []
    for preference in preferences:
        phone = phone_of_wa_id(preference.customer.wa_id) if preference.customer.wa_id else None
        contact_id = customers.contact_of(phone_number=phone, user_id=preference.customer.user_id)
        assert contact_id is not None  # learn_customers saw every preference's customer
        changes.append((contact_id, preference.value is Preference.STOP, preference.timestamp))
    set_marketing_preferences(session, channel_id=channel_id, changes=changes)
