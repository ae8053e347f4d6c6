"""Applying Meta's webhooks: message statuses (forward only, idempotent) and customer messages."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session

from wagate.channels.models import Channel
from wagate.conversations.models import ConversationStatus
from wagate.conversations.repository import get_or_create_conversation
from wagate.db import isoformat, utcnow
from wagate.errors import InvalidPhoneNumber
from wagate.events.publish import ConversationChange, publish_conversation_changes
from wagate.events.subscriptions import Subscriptions
from wagate.ids import new_id
from wagate.messages.events import publish_messages_created, publish_status_changes
from wagate.messages.models import Direction, Message, MessageStatus, ParkedStatus
from wagate.messages.status import StatusChange, apply_status
from wagate.phones import normalize_phone_number
from wagate.whatsapp.payloads import InboundMessage, StatusKind, StatusUpdate, parse_webhook

log = logging.getLogger(__name__)

_STATUS = {
    StatusKind.SENT: MessageStatus.sent,
    StatusKind.DELIVERED: MessageStatus.delivered,
    StatusKind.READ: MessageStatus.read,
    StatusKind.FAILED: MessageStatus.failed,
}
_ORDER = {MessageStatus.sent: 0, MessageStatus.delivered: 1, MessageStatus.read: 2, MessageStatus.failed: 3}


def _messages_values(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The `value` of each change that `parse_webhook` reads, in its order: changes of other fields
    (template updates, account alerts) have shapes of their own and nothing for messages."""
    return [
        change["value"]
        for entry in body["entry"]
        for change in entry["changes"]
        if change.get("field", "messages") == "messages"
    ]


def _external_error(update: StatusUpdate) -> str | None:
    if not update.errors:
        return None
    error = update.errors[0]
    return f"{error.code}: {error.title or error.message or 'unknown error'}"


def _match(
    update: StatusUpdate, channel_id: int | None, by_wamid: dict[str, Message], by_id: dict[str, Message]
) -> Message | None:
    """The message a status is about, among the messages of the channel it came for: by Meta's id, or
    by ours (biz_opaque_callback_data) while the message's wamid is unknown (its send's reply was lost).
    A status parked before parked statuses kept their channel (`channel_id` None) goes by Meta's id alone."""
    message = by_wamid.get(update.id)
    if message is None and channel_id is not None and update.biz_opaque_callback_data:
        ours = by_id.get(update.biz_opaque_callback_data)
        if ours is not None and ours.upstream_message_id is None:
            message = ours
    if message is None or channel_id is None or message.channel_id == channel_id:
        return message
    return None


@dataclass
class StatusesApplied:
    """What a round of Meta statuses did: the status changes, and the messages whose send had no
    known outcome (its reply never came back) that a status settled: their send rows are done."""

    changes: list[StatusChange] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)

    def add(self, other: StatusesApplied) -> None:
        self.changes += other.changes
        self.settled += other.settled


def apply_status_payloads(
    session: Session, statuses: Sequence[tuple[int | None, dict[str, Any]]], *, park_unknown: bool = True
) -> StatusesApplied:
    """Apply Meta status objects, each with the id of the channel it came for, to our messages;
    statuses for wamids not known on their channel are parked. The caller settles the sends of
    what it returns as `settled`."""
    parsed: list[tuple[StatusUpdate, MessageStatus, int | None, dict[str, Any]]] = []
    for channel_id, payload in statuses:
        update = StatusUpdate.from_dict(payload)
        status = _STATUS.get(update.status)
        if status is not None:
            parsed.append((update, status, channel_id, payload))
    if not parsed:
        return StatusesApplied()
    wamids = {u.id for u, _, _, _ in parsed}
    our_ids = {u.biz_opaque_callback_data for u, _, _, _ in parsed if u.biz_opaque_callback_data}
    messages = list(
        session.scalars(
            select(Message).where(
                Message.direction == Direction.outbound,
                or_(Message.upstream_message_id.in_(wamids), Message.id.in_(our_ids)),
            )
        )
    )
    by_id = {m.id: m for m in messages}
    by_wamid = {m.upstream_message_id: m for m in messages if m.upstream_message_id}
    changes: list[StatusChange] = []
    settled: list[str] = []
    # Oldest first, so that history reads in the order things happened when Meta's webhooks are reordered.
    for update, status, channel_id, payload in sorted(parsed, key=lambda p: (p[0].timestamp, _ORDER[p[1]])):
        message = _match(update, channel_id, by_wamid, by_id)
        if message is None:
            if park_unknown:
                session.add(
                    ParkedStatus(
                        upstream_message_id=update.id,
                        channel_id=channel_id,
                        payload=payload,
                        received_at=utcnow(),
                    )
                )
            continue
        if message.upstream_message_id is None:
            # The send's own result never came back (timeout, crash): this webhook settles it.
            message.upstream_message_id = update.id
            by_wamid[update.id] = message
            settled.append(message.id)
        change = apply_status(message, status, at=update.timestamp, external_error=_external_error(update))
        if change:
            changes.append(change)
    applied = StatusesApplied(changes, settled)
    if settled:
        session.flush()
        applied.add(apply_parked_statuses(session, [by_id[m].upstream_message_id or "" for m in settled]))
    session.flush()
    return applied


def apply_parked_statuses(session: Session, wamids: list[str]) -> StatusesApplied:
    """Statuses that came before their send result: apply them now that the wamid is known."""
    parked = list(session.scalars(select(ParkedStatus).where(ParkedStatus.upstream_message_id.in_(wamids))))
    if not parked:
        return StatusesApplied()
    session.execute(delete(ParkedStatus).where(ParkedStatus.id.in_([p.id for p in parked])))
    return apply_status_payloads(session, [(p.channel_id, p.payload) for p in parked], park_unknown=False)


def store_inbound(
    session: Session,
    *,
    channel: Channel,
    inbound: list[InboundMessage],
    subscriptions: Subscriptions | None = None,
) -> int:
    """A customer's messages: into the conversation, opening the 24-hour window and the conversation.

    Returns how many events it wrote about them."""
    known = set(
        session.scalars(
            select(Message.upstream_message_id).where(
                Message.upstream_message_id.in_([m.wamid for m in inbound])
            )
        )
    )
    stored: list[tuple[Message, str]] = []
    conversation_changes: list[ConversationChange] = []
    for item in inbound:
        if item.wamid in known:
            continue  # Meta delivers webhooks at least once
        known.add(item.wamid)
        try:
            phone_number = normalize_phone_number(item.from_, field="from")
        except InvalidPhoneNumber:
            phone_number = "+" + item.from_.lstrip("+")
        conversation, created = get_or_create_conversation(
            session,
            account_id=channel.account_id,
            channel_id=channel.id,
            phone_number=phone_number,
            initial_status=ConversationStatus.open,
            contact_name=item.profile_name,
        )
        previous = None if created else conversation.status.value
        if conversation.status is ConversationStatus.resolved:
            conversation.status = ConversationStatus.open
        conversation_changes.append(
            ConversationChange(
                channel.account_id,
                conversation.id,
                channel.id,
                phone_number,
                previous,
                conversation.status.value,
            )
        )
        last = conversation.last_customer_message_at
        conversation.last_customer_message_at = item.timestamp if last is None else max(last, item.timestamp)
        conversation.last_activity_at = utcnow()
        message = Message(
            id=new_id("msg"),
            account_id=channel.account_id,
            channel_id=channel.id,
            conversation_id=conversation.id,
            direction=Direction.inbound,
            phone_number=phone_number,
            status=MessageStatus.delivered,
            text=item.text if item.text is not None else f"[{item.type}]",
            upstream_message_id=item.wamid,
            cost_micros=0,
            cost_currency="",
            status_history=[{"status": MessageStatus.delivered.value, "at": isoformat(item.timestamp) or ""}],
            created_at=item.timestamp,
            updated_at=utcnow(),
        )
        session.add(message)
        stored.append((message, conversation.status.value))
    session.flush()
    return publish_messages_created(session, stored) + publish_conversation_changes(
        session, conversation_changes
    )


@dataclass(frozen=True)
class WebhooksApplied:
    events: int  # how many events it wrote (the event lane has work only when some were)
    settled: list[str]  # messages whose unconfirmed sends a status settled (see StatusesApplied)


def process_webhook_bodies(
    session: Session, bodies: list[dict[str, Any]], subscriptions: Subscriptions | None = None
) -> WebhooksApplied:
    """Everything in a batch of stored Meta webhook bodies, in one transaction with its events.

    Each change names its channel by phone number id: what it says applies to that channel's messages
    and conversations only; changes for a number no channel has are skipped."""
    statuses: list[tuple[str, dict[str, Any]]] = []
    inbound_by_number: dict[str, list[InboundMessage]] = {}
    for body in bodies:
        # The receiver checked the shape with parse_webhook; the raw statuses are what gets parked.
        for value, raw in zip(parse_webhook(body), _messages_values(body), strict=True):
            statuses.extend((value.phone_number_id, status) for status in raw.get("statuses") or [])
            if value.messages:
                inbound_by_number.setdefault(value.phone_number_id, []).extend(value.messages)
    numbers = {number for number, _ in statuses} | inbound_by_number.keys()
    if not numbers:
        return WebhooksApplied(0, [])
    channels = {
        c.phone_number_id: c
        for c in session.scalars(select(Channel).where(Channel.phone_number_id.in_(sorted(numbers))))
    }
    if unknown := numbers - channels.keys():
        log.warning(
            "Meta webhooks for phone number ids of no channel skipped: %s", ", ".join(sorted(unknown))
        )
    scoped = [(channels[number].id, status) for number, status in statuses if number in channels]
    applied = apply_status_payloads(session, scoped)
    events = publish_status_changes(session, applied.changes, subscriptions)
    for number, inbound in inbound_by_number.items():
        if number in channels:
            events += store_inbound(session, channel=channels[number], inbound=inbound)
    return WebhooksApplied(events, applied.settled)
