"""Applying Meta's webhooks: message statuses (forward only, idempotent) and customer messages."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from wagate.channels.models import Channel
from wagate.conversations.models import ConversationStatus
from wagate.conversations.service import get_or_create_conversation
from wagate.db import isoformat, utcnow
from wagate.errors import InvalidPhoneNumber
from wagate.events.publish import (
    ConversationChange,
    publish_conversation_changes,
    publish_messages_created,
    publish_status_changes,
)
from wagate.events.subscriptions import Subscriptions
from wagate.ids import new_id
from wagate.messages.models import Direction, Message, MessageStatus, ParkedStatus
from wagate.messages.status import StatusChange, apply_status
from wagate.phones import normalize_phone_number
from wagate.whatsapp.payloads import InboundMessage, StatusKind, StatusUpdate, parse_webhook

_STATUS = {
    StatusKind.SENT: MessageStatus.sent,
    StatusKind.DELIVERED: MessageStatus.delivered,
    StatusKind.READ: MessageStatus.read,
    StatusKind.FAILED: MessageStatus.failed,
}
_ORDER = {MessageStatus.sent: 0, MessageStatus.delivered: 1, MessageStatus.read: 2, MessageStatus.failed: 3}


def raw_statuses(body: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for entry in body.get("entry") or []:
        for change in entry.get("changes") or []:
            yield from (change.get("value") or {}).get("statuses") or []


def _external_error(update: StatusUpdate) -> str | None:
    if not update.errors:
        return None
    error = update.errors[0]
    return f"{error.code}: {error.title or error.message or 'unknown error'}"


def apply_status_payloads(
    session: Session, payloads: list[dict[str, Any]], *, park_unknown: bool = True
) -> list[StatusChange]:
    """Apply Meta status objects to our messages; statuses for unknown wamids are parked."""
    parsed: list[tuple[StatusUpdate, MessageStatus, dict[str, Any]]] = []
    for payload in payloads:
        update = StatusUpdate.from_dict(payload)
        status = _STATUS.get(update.status)
        if status is not None:
            parsed.append((update, status, payload))
    if not parsed:
        return []
    wamids = {u.id for u, _, _ in parsed}
    our_ids = {u.biz_opaque_callback_data for u, _, _ in parsed if u.biz_opaque_callback_data}
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
    for update, status, payload in sorted(parsed, key=lambda p: (p[0].timestamp, _ORDER[p[1]])):
        message = by_wamid.get(update.id) or by_id.get(update.biz_opaque_callback_data or "")
        if message is None:
            if park_unknown:
                session.add(
                    ParkedStatus(upstream_message_id=update.id, payload=payload, received_at=utcnow())
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
    if settled:
        from wagate.outbox.sends import apply_parked_statuses, settle_sends

        settle_sends(session, settled)
        session.flush()
        changes += apply_parked_statuses(session, [by_id[m].upstream_message_id or "" for m in settled])
    session.flush()
    return changes


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


def process_webhook_bodies(
    session: Session, bodies: list[dict[str, Any]], subscriptions: Subscriptions | None = None
) -> int:
    """Everything in a batch of stored Meta webhook bodies, in one transaction with its events.

    Returns how many events it wrote (the event lane has work only when some were)."""
    statuses = [status for body in bodies for status in raw_statuses(body)]
    events = publish_status_changes(session, apply_status_payloads(session, statuses), subscriptions)
    inbound_by_number: dict[str, list[InboundMessage]] = {}
    for body in bodies:
        for value in parse_webhook(body):
            if value.messages:
                inbound_by_number.setdefault(value.phone_number_id, []).extend(value.messages)
    if inbound_by_number:
        channels = session.scalars(
            select(Channel).where(Channel.phone_number_id.in_(list(inbound_by_number)))
        )
        for channel in channels:
            events += store_inbound(
                session, channel=channel, inbound=inbound_by_number[channel.phone_number_id]
            )
    return events
