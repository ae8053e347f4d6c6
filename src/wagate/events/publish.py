"""Writing events: each in the same transaction as the change it reports, one delivery per endpoint.

A delivery is a `deliveries` row (the event's body, kept for the account to read and to re-deliver)
and a `deliver_event` outbox row that sends it. Rows for one message and one endpoint share an
ordering key, so they are sent one after another in the order they were written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete, insert, or_, select, update
from sqlalchemy.orm import Session

from wagate.conversations.models import Conversation
from wagate.db import table_of, utcnow
from wagate.events.models import Delivery, DeliveryKind, DeliveryState, EventKind
from wagate.events.subscriptions import Subscriptions, read_subscriptions
from wagate.ids import new_id
from wagate.messages.models import Message
from wagate.messages.schemas import message_view
from wagate.messages.status import StatusChange
from wagate.outbox.models import JobKind, JobState, OutboxJob, Priority

_INSERT_DELIVERY = insert(table_of(Delivery))
_INSERT_OUTBOX = insert(table_of(OutboxJob))
REPORT_BATCH = 500


@dataclass
class NewDelivery:
    account_id: int
    kind: DeliveryKind
    body: dict[str, Any]
    message_id: str | None
    ordering_key: str | None
    webhook_id: int | None = None
    url: str | None = None
    secret_encrypted: str | None = None
    id: str = field(default_factory=lambda: new_id("evt"))


def write_deliveries(session: Session, deliveries: list[NewDelivery], *, now: datetime | None = None) -> int:
    """Store deliveries and their outbox rows, two statements for any number of them."""
    if not deliveries:
        return 0
    now = now or utcnow()
    connection = session.connection()
    connection.execute(
        _INSERT_DELIVERY,
        [
            {
                "id": d.id,
                "account_id": d.account_id,
                "webhook_id": d.webhook_id,
                "url": d.url,
                "secret_encrypted": d.secret_encrypted,
                "message_id": d.message_id,
                "kind": d.kind,
                "body": d.body,
                "state": DeliveryState.pending,
                "attempts": 0,
                "created_at": now,
                "finished_at": None,
            }
            for d in deliveries
        ],
    )
    connection.execute(
        _INSERT_OUTBOX,
        [_outbox_row(d.id, d.account_id, d.message_id, d.ordering_key, now) for d in deliveries],
    )
    return len(deliveries)


def _outbox_row(
    delivery_id: str, account_id: int | None, message_id: str | None, ordering_key: str | None, now: datetime
) -> dict[str, Any]:
    return {
        "kind": JobKind.deliver_event,
        "state": JobState.ready,
        "priority": Priority.background,
        "channel_id": None,
        "account_id": account_id,
        "message_id": message_id,
        "batch_id": None,
        "ordering_key": ordering_key,
        "payload": {"delivery_id": delivery_id},
        "run_at": now,
        "attempts": 0,
        "last_error": None,
        "locked_by": None,
        "locked_until": None,
        "created_at": now,
    }


def redeliver(session: Session, delivery: Delivery) -> None:
    """Send a delivery again, with the same `webhook-id`, behind anything still pending for its message."""
    delivery.state = DeliveryState.pending
    delivery.finished_at = None
    key = _ordering_key(delivery.webhook_id, delivery.message_id) if delivery.message_id else None
    session.connection().execute(
        _INSERT_OUTBOX, [_outbox_row(delivery.id, delivery.account_id, delivery.message_id, key, utcnow())]
    )
    session.flush()


def _ordering_key(webhook_id: int | None, message_id: str) -> str:
    return (
        f"{webhook_key_prefix(webhook_id)}{message_id}"
        if webhook_id is not None
        else f"callback:{message_id}"
    )


def webhook_key_prefix(webhook_id: int) -> str:
    """What the ordering keys of every delivery to one webhook start with."""
    return f"webhook:{webhook_id}:"


def cancel_pending(session: Session, webhook_ids: list[int]) -> None:
    """A webhook was disabled: its pending deliveries fail now (they can be re-delivered by hand)."""
    if not webhook_ids:
        return
    now = utcnow()
    session.execute(
        update(Delivery)
        .where(Delivery.webhook_id.in_(webhook_ids), Delivery.state == DeliveryState.pending)
        .values(state=DeliveryState.failed, finished_at=now)
    )
    session.execute(
        delete(OutboxJob).where(
            OutboxJob.kind == JobKind.deliver_event,
            or_(*(OutboxJob.ordering_key.startswith(webhook_key_prefix(w)) for w in webhook_ids)),
        )
    )


def _subscribers(
    session: Session, subscriptions: Subscriptions | None, account_ids: Iterable[int], kind: EventKind
) -> dict[int, list[int]]:
    if subscriptions is None:
        subscriptions = read_subscriptions(session, account_ids)
    return subscriptions.for_kind(kind)


def publish_status_changes(
    session: Session, changes: list[StatusChange], subscriptions: Subscriptions | None = None
) -> int:
    """`message_updated` for the account's webhooks and `status_changed` for the message's callback.

    `subscriptions`: the cached snapshot; without it the webhooks are read from the database."""
    if not changes:
        return 0
    webhooks = _subscribers(
        session, subscriptions, {c.account_id for c in changes}, EventKind.message_updated
    )
    wanted = [c for c in changes if c.account_id in webhooks or _on_change(c.status_callback)]
    if not wanted:
        return 0
    conversation_status = {
        conversation_id: status
        for conversation_id, status in session.execute(
            select(Conversation.id, Conversation.status).where(
                Conversation.id.in_({c.conversation_id for c in wanted})
            )
        )
    }
    deliveries: list[NewDelivery] = []
    for change in wanted:
        view = change.view
        status = conversation_status.get(change.conversation_id)
        view["conversation"]["status"] = status.value if status is not None else None
        for webhook_id in webhooks.get(change.account_id, ()):
            deliveries.append(
                NewDelivery(
                    account_id=change.account_id,
                    kind=DeliveryKind.message_updated,
                    body={
                        "event": "message_updated",
                        "account_id": change.account_id,
                        "previous_status": change.previous.value,
                        "message": view,
                    },
                    message_id=change.message_id,
                    ordering_key=_ordering_key(webhook_id, change.message_id),
                    webhook_id=webhook_id,
                )
            )
        callback = change.status_callback
        if callback is not None and _on_change(callback):
            deliveries.append(
                _callback_delivery(
                    change.account_id,
                    callback,
                    message_id=change.message_id,
                    reason="status_changed",
                    previous=change.previous.value,
                    view=view,
                    ordered=True,
                )
            )
    return write_deliveries(session, deliveries)


def _on_change(callback: dict[str, Any] | None) -> bool:
    return bool(callback and callback.get("on_change"))


def _callback_delivery(
    account_id: int,
    callback: dict[str, Any],
    *,
    message_id: str,
    reason: str,
    previous: str | None,
    view: dict[str, Any],
    ordered: bool,
) -> NewDelivery:
    return NewDelivery(
        account_id=account_id,
        kind=DeliveryKind.message_status,
        body={"event": "message_status", "reason": reason, "previous_status": previous, "message": view},
        message_id=message_id,
        ordering_key=_ordering_key(None, message_id) if ordered else None,
        url=callback["url"],
        secret_encrypted=callback.get("secret_encrypted"),
    )


def schedule_status_reports(connection: Connection, reports: list[tuple[str, int]], *, now: datetime) -> None:
    """`after_seconds` reports (message id, N): rows due at acceptance + N, stored with the messages."""
    rows = []
    for message_id, after_seconds in reports:
        row = _outbox_row("", None, message_id, None, now + timedelta(seconds=after_seconds))
        row.update(kind=JobKind.status_report, payload={})
        rows.append(row)
    connection.execute(_INSERT_OUTBOX, rows)


def due_reports(session: Session, *, limit: int = REPORT_BATCH) -> list[int]:
    """The outbox rows of `after_seconds` reports that are due, oldest first."""
    due = (
        select(OutboxJob.id)
        .where(OutboxJob.kind == JobKind.status_report, OutboxJob.run_at <= utcnow())
        .order_by(OutboxJob.run_at)
        .limit(limit)
    )
    return list(session.scalars(due))


def render_reports(session: Session, job_ids: Sequence[int]) -> int:
    """Turn these due `after_seconds` reports into deliveries carrying the message as it is now.

    A report another process rendered meanwhile is gone from the outbox and is skipped."""
    message_ids = list(
        session.scalars(
            delete(OutboxJob)
            .where(OutboxJob.id.in_(job_ids), OutboxJob.kind == JobKind.status_report)
            .returning(OutboxJob.message_id)
        )
    )
    if not message_ids:
        return 0
    rows = session.execute(
        select(Message, Conversation.status)
        .join(Conversation, Conversation.id == Message.conversation_id)
        .where(Message.id.in_([m for m in message_ids if m]))
    )
    deliveries: list[NewDelivery] = []
    for message, conversation_status in rows:
        callback = message.status_callback
        if not callback or not callback.get("url"):
            continue
        history = message.status_history
        deliveries.append(
            _callback_delivery(
                message.account_id,
                callback,
                message_id=message.id,
                reason="after_seconds",
                previous=history[-2]["status"] if len(history) > 1 else None,
                view=message_view(message, conversation_status=conversation_status.value),
                # One report, due at its own time: it must not wait behind the message's other events.
                ordered=False,
            )
        )
    return write_deliveries(session, deliveries)


@dataclass(frozen=True)
class ConversationChange:
    account_id: int
    conversation_id: int
    channel_id: int
    phone_number: str
    previous: str | None  # None: the conversation was just created
    current: str


def publish_messages_created(
    session: Session, created: list[tuple[Message, str]], subscriptions: Subscriptions | None = None
) -> int:
    """`message_created` for each (message, its conversation's status): API sends and customer messages."""
    if not created:
        return 0
    webhooks = _subscribers(
        session, subscriptions, {m.account_id for m, _ in created}, EventKind.message_created
    )
    deliveries = [
        NewDelivery(
            account_id=message.account_id,
            kind=DeliveryKind.message_created,
            body={
                "event": "message_created",
                "account_id": message.account_id,
                "direction": message.direction.value,
                "message": message_view(message, conversation_status=conversation_status),
            },
            message_id=message.id,
            # Same key as the message's `message_updated` events: created always arrives first.
            ordering_key=_ordering_key(webhook_id, message.id),
            webhook_id=webhook_id,
        )
        for message, conversation_status in created
        for webhook_id in webhooks.get(message.account_id, ())
    ]
    return write_deliveries(session, deliveries)


def publish_conversation_changes(
    session: Session, changes: list[ConversationChange], subscriptions: Subscriptions | None = None
) -> int:
    """`conversation_status_changed` for conversations created or moved to another status."""
    changes = [c for c in changes if c.previous != c.current]
    if not changes:
        return 0
    webhooks = _subscribers(
        session, subscriptions, {c.account_id for c in changes}, EventKind.conversation_status_changed
    )
    deliveries = [
        NewDelivery(
            account_id=change.account_id,
            kind=DeliveryKind.conversation_status_changed,
            body={
                "event": "conversation_status_changed",
                "account_id": change.account_id,
                "previous_status": change.previous,
                "conversation": {
                    "id": change.conversation_id,
                    "channel_id": change.channel_id,
                    "phone_number": change.phone_number,
                    "status": change.current,
                },
            },
            message_id=None,
            ordering_key=f"{webhook_key_prefix(webhook_id)}conversation:{change.conversation_id}",
            webhook_id=webhook_id,
        )
        for change in changes
        for webhook_id in webhooks.get(change.account_id, ())
    ]
    return write_deliveries(session, deliveries)
