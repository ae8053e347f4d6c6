"""Applying what Meta sends about conversations Meta's AI agent holds (API.md section 14), and its
notices about customers (system messages).

- The agent's replies (echoes on `standby`) are stored as outbound messages by "meta_business_agent"
  (`sent_by`): in the conversation, moved on by their statuses like any, but not sent through the API:
  not listed or readable there, no events, no cost unless Meta's `pricing` says so.
- A handover sets who holds the conversation; a send takes it back (conversations/repository/writes.py).
- A user id change moves the customer to the new id (conversations/user_ids.py); the notice is shown in
  the conversation as a note of Meta's, not as the customer's words, and renews no window (Meta opens
  the customer service window on a message or call from the user).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from wagate.channels.models import Channel
from wagate.conversations.customers import Customers, phone_of_wa_id
from wagate.conversations.last_message import FROM_META_AGENT, LastMessage, note_last_message
from wagate.conversations.models import (
    HANDLED_BY_AGENT,
    USER_ID_LENGTH,
    Contact,
    Conversation,
    ConversationStatus,
    CustomerId,
)
from wagate.conversations.service import get_or_create_conversation
from wagate.conversations.user_ids import change_user_id
from wagate.core.db import isoformat, utcnow
from wagate.core.ids import new_id
from wagate.core.live import LiveChange, LiveKind, record_live
from wagate.messages.models import Direction, Message, MessageStatus
from wagate.messages.repository import move_conversation_messages
from wagate.whatsapp.payloads import CustomerRef
from wagate.whatsapp.standby import EchoMessage, Handover
from wagate.whatsapp.system_messages import USER_CHANGED_NUMBER, SystemMessage

META_BUSINESS_AGENT = HANDLED_BY_AGENT  # a message's `sent_by` for the agent's replies


def _known(session: Session, wamids: list[str]) -> set[str]:
    """Which of these Meta message ids are stored already (Meta delivers webhooks at least once)."""
    found = session.scalars(
        select(Message.upstream_message_id).where(Message.upstream_message_id.in_(wamids))
    )
    return {wamid for wamid in found if wamid}


def _contact(customers: Customers, ref: CustomerRef) -> tuple[int | None, str | None]:
    phone = phone_of_wa_id(ref.wa_id) if ref.wa_id else None
    contact_id = customers.contact_of(phone_number=phone, user_id=ref.user_id)
    return contact_id, customers.phone_of.get(contact_id, phone) if contact_id is not None else phone


def received_message(
    channel: Channel,
    conversation_id: int,
    *,
    direction: Direction,
    status: MessageStatus,
    wamid: str,
    at: datetime,
    text: str,
    phone_number: str | None,
    user_id: str | None,
    sent_by: str | None = None,
) -> Message:
    """A message that came from Meta rather than through our send path (a customer's, an echo of Meta's
    AI agent, a notice of WhatsApp's): free unless Meta's pricing says otherwise, its one status at
    Meta's time."""
    return Message(
        id=new_id("msg"),
        account_id=channel.account_id,
        channel_id=channel.id,
        conversation_id=conversation_id,
        direction=direction,
        phone_number=phone_number,
        user_id=user_id[:USER_ID_LENGTH] if user_id else None,
        status=status,
        sent_by=sent_by,
        text=text,
        upstream_message_id=wamid,
        cost_micros=0,
        cost_currency="",
        status_history=[{"status": status.value, "at": isoformat(at) or ""}],
        created_at=at,
        updated_at=utcnow(),
    )


def store_echoes(
    session: Session, *, channel: Channel, echoes: list[EchoMessage], customers: Customers
) -> list[str]:
    """The agent's replies: outbound messages of their conversations, which the agent holds from now
    on (a new one starts resolved: the agent is answering). Returns the wamids stored, whose statuses
    may have come (and been parked) before them."""
    known = _known(session, [echo.wamid for echo in echoes])
    live: list[LiveChange] = []
    stored: list[str] = []
    for echo in echoes:
        if echo.wamid in known:
            continue
        known.add(echo.wamid)
        contact_id, phone = _contact(customers, echo.customer)
        assert contact_id is not None  # learn_customers saw every echo's customer
        conversation, _ = get_or_create_conversation(
            session,
            account_id=channel.account_id,
            channel_id=channel.id,
            contact_id=contact_id,
            initial_status=ConversationStatus.resolved,
        )
        conversation.handled_by = HANDLED_BY_AGENT
        conversation.last_activity_at = utcnow()
        text = echo.text if echo.text is not None else f"[{echo.type}]"
        # A reply to the customer: the list shows it, and the customer no longer waits.
        note_last_message(conversation, LastMessage(FROM_META_AGENT, text), at=echo.timestamp)
        user_id = echo.customer.user_id
        session.add(
            received_message(
                channel,
                conversation.id,
                direction=Direction.outbound,
                status=MessageStatus.sent,
                wamid=echo.wamid,
                at=echo.timestamp,
                text=text,
                phone_number=phone,
                user_id=user_id,
                sent_by=META_BUSINESS_AGENT,
            )
        )
        stored.append(echo.wamid)
        live.append(
            LiveChange(
                channel.account_id,
                channel.id,
                conversation.id,
                LiveKind.message,
                conversation_status=conversation.status.value,
            )
        )
    session.flush()
    record_live(session, live)
    return stored


def apply_handovers(
    session: Session, *, channel: Channel, handovers: list[Handover], customers: Customers
) -> None:
    """Who holds each conversation now. A handover about a customer with no conversation on the
    channel changes nothing: there is nothing to hold yet (their first message on `standby` or
    `messages` says who answers)."""
    live: list[LiveChange] = []
    for handover in handovers:
        contact_id, _ = _contact(customers, handover.customer)
        if contact_id is None:
            continue
        conversation = session.scalar(
            select(Conversation).where(
                Conversation.channel_id == channel.id, Conversation.contact_id == contact_id
            )
        )
        if conversation is None or conversation.handled_by == handover.holder.value:
            continue
        conversation.handled_by = handover.holder.value
        live.append(
            LiveChange(
                channel.account_id,
                channel.id,
                conversation.id,
                LiveKind.conversation,
                conversation_status=conversation.status.value,
            )
        )
    session.flush()
    record_live(session, live)


def apply_system_messages(session: Session, *, channel: Channel, notices: list[SystemMessage]) -> None:
    """Meta's notices about customers. Run before the batch's customers are learned: a message under
    the new user id in the same batch then lands with the customer it names."""
    known = _known(session, [notice.wamid for notice in notices])
    live: list[LiveChange] = []
    for notice in notices:
        if notice.wamid in known:
            continue
        known.add(notice.wamid)
        contact_id = None
        if notice.moves_user_id:
            assert notice.previous_user_id is not None and notice.user_id is not None
            contact_id = change_user_id(
                session,
                account_id=channel.account_id,
                previous=notice.previous_user_id[:USER_ID_LENGTH],
                current=notice.user_id[:USER_ID_LENGTH],
                move_messages=move_conversation_messages,
                parent_user_id=notice.parent_user_id[:USER_ID_LENGTH] if notice.parent_user_id else None,
            )
        elif notice.previous_user_id:
            contact_id = session.scalar(
                select(CustomerId.contact_id).where(
                    CustomerId.account_id == channel.account_id,
                    CustomerId.user_id == notice.previous_user_id[:USER_ID_LENGTH],
                )
            )
        if contact_id is None and notice.from_:
            contact_id = session.scalar(
                select(Contact.id).where(
                    Contact.account_id == channel.account_id,
                    Contact.phone_number == phone_of_wa_id(notice.from_),
                )
            )
        if notice.kind == USER_CHANGED_NUMBER and notice.new_wa_id and contact_id is not None:
            _take_number(session, channel.account_id, contact_id, phone_of_wa_id(notice.new_wa_id))
        conversation = (
            session.scalar(
                select(Conversation).where(
                    Conversation.channel_id == channel.id, Conversation.contact_id == contact_id
                )
            )
            if contact_id is not None
            else None
        )
        if conversation is None:
            continue  # no conversation to show it in
        session.add(
            received_message(
                channel,
                conversation.id,
                direction=Direction.system,
                status=MessageStatus.delivered,
                wamid=notice.wamid,
                at=notice.timestamp,
                text=notice.body or _note(notice),
                phone_number=phone_of_wa_id(notice.from_) if notice.from_ else None,
                user_id=notice.user_id,
            )
        )
        live.append(LiveChange(channel.account_id, channel.id, conversation.id, LiveKind.message))
    session.flush()
    record_live(session, live)


def _take_number(session: Session, account_id: int, contact_id: int, number: str) -> None:
    """The customer's new number is theirs, unless another customer of the account has it already
    (then both stay as they are: which of them Meta means is not ours to guess)."""
    taken = session.scalar(
        select(Contact.id).where(Contact.account_id == account_id, Contact.phone_number == number)
    )
    if taken is None:
        session.execute(update(Contact).where(Contact.id == contact_id).values(phone_number=number))


def _note(notice: SystemMessage) -> str:
    if notice.moves_user_id:
        return f"The customer's WhatsApp user id changed from {notice.previous_user_id} to {notice.user_id}."
    if notice.new_wa_id:
        return f"The customer changed their phone number to +{notice.new_wa_id.lstrip('+')}."
    return f"WhatsApp notice: {notice.kind}"
