"""Writing events: each in the same transaction as the change it reports, one delivery per endpoint.

A delivery is a `deliveries` row (the event's body, kept for the account to read and to re-deliver)
and a `deliver_event` outbox row that sends it. Rows for one message and one endpoint share an
ordering key, so they are sent one after another in the order they were written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, or_, update
from sqlalchemy.orm import Session

from wagate.core.db import utcnow
from wagate.core.ids import new_id
from wagate.core.tables import table_of
from wagate.events.models import Delivery, DeliveryKind, DeliveryState, EventKind
from wagate.events.subscriptions import Subscriptions, read_subscriptions
from wagate.outbox.models import JobKind, OutboxJob, Priority, outbox_row

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
    return outbox_row(
        JobKind.deliver_event,
        payload={"delivery_id": delivery_id},
        run_at=now,
        priority=Priority.background,
        now=now,
        account_id=account_id,
        message_id=message_id,
        ordering_key=ordering_key,
    )


def redeliver(session: Session, delivery: Delivery) -> None:
    """Send a delivery again, with the same `webhook-id`, behind anything still pending for its message."""
    delivery.state = DeliveryState.pending
    delivery.finished_at = None
    key = ordering_key(delivery.webhook_id, delivery.message_id) if delivery.message_id else None
    session.connection().execute(
        _INSERT_OUTBOX, [_outbox_row(delivery.id, delivery.account_id, delivery.message_id, key, utcnow())]
    )
    session.flush()


def ordering_key(webhook_id: int | None, message_id: str) -> str:
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


def subscribers(
    session: Session, subscriptions: Subscriptions | None, account_ids: Iterable[int], kind: EventKind
) -> dict[int, list[int]]:
    if subscriptions is None:
        subscriptions = read_subscriptions(session, account_ids)
    return subscriptions.for_kind(kind)


@dataclass(frozen=True)
class ConversationChange:
    account_id: int
    conversation_id: int
    channel_id: int
    phone_number: str | None  # None for a customer known only by user id
    previous: str | None  # None: the conversation was just created
    current: str
    user_id: str | None = None


def publish_conversation_changes(
    session: Session, changes: list[ConversationChange], subscriptions: Subscriptions | None = None
) -> int:
    """`conversation_status_changed` for conversations created or moved to another status."""
    changes = [c for c in changes if c.previous != c.current]
    if not changes:
        return 0
    webhooks = subscribers(
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
                    "user_id": change.user_id,
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
