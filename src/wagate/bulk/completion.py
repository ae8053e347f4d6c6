"""A batch's completion: once none of its sends waits to be handed to Meta, it is `completed` and its
`batch_completed` events are written, in the transaction of the outcome that made it so. Also the
batch's counts and cost, one query for any number of batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import case, exists, func, select, update
from sqlalchemy.orm import Session

from wagate.bulk.models import Batch, BatchStatus
from wagate.bulk.schemas import template_view
from wagate.core.db import isoformat, utcnow
from wagate.core.live import LiveChange, LiveKind, record_live
from wagate.events.models import DeliveryKind, EventKind
from wagate.events.publish import NewDelivery, webhook_key_prefix, write_deliveries
from wagate.events.subscriptions import Subscriptions, read_subscriptions
from wagate.messages.models import Message, MessageStatus
from wagate.messages.schemas import format_amount
from wagate.outbox.models import JobKind, JobState, OutboxJob

# A send still waiting to be handed to Meta (an `unconfirmed` one was handed).
WAITING = (JobState.ready, JobState.in_flight)


def complete_batches(
    session: Session, message_ids: list[str], subscriptions: Subscriptions | None = None
) -> int:
    """Sends of these messages were just handed to Meta or failed: complete the batches with none left.

    Returns how many events it wrote."""
    batch_ids = set(
        session.scalars(
            select(Message.batch_id)
            .where(Message.id.in_(message_ids), Message.batch_id.is_not(None))
            .distinct()
        )
    )
    if not batch_ids:
        return 0
    # One send still waiting is enough to know, so the check stops at it. It read every waiting row of
    # the batch (up to 1000) once per recorded round: 137 buffer reads a call in the scale-out test,
    # 32 now (docs/decisions/0004-outbox-claims.md).
    send_waiting = exists().where(
        OutboxJob.batch_id == Batch.id,
        OutboxJob.kind == JobKind.send_message,
        OutboxJob.state.in_(WAITING),
    )
    waiting = set(session.scalars(select(Batch.id).where(Batch.id.in_(batch_ids), send_waiting)))
    done = batch_ids - waiting
    if not done:
        return 0
    now = utcnow()
    finished = list(
        session.scalars(
            update(Batch)
            .where(Batch.id.in_(done), Batch.status == BatchStatus.processing)
            .values(status=BatchStatus.completed, completed_at=now)
            .returning(Batch)
        )
    )
    # The dashboard's batch pages and lists follow a batch to `completed` (no conversation of its own).
    record_live(session, [LiveChange(b.account_id, b.channel_id, 0, LiveKind.status) for b in finished])
    return publish_completed(session, finished, subscriptions)


def publish_completed(session: Session, batches: list[Batch], subscriptions: Subscriptions | None) -> int:
    if not batches:
        return 0
    if subscriptions is None:
        subscriptions = read_subscriptions(session, {b.account_id for b in batches})
    webhooks = subscriptions.for_kind(EventKind.batch_completed)
    wanted = [b for b in batches if b.account_id in webhooks]
    if not wanted:
        return 0
    summaries = summaries_of(session, [b.id for b in wanted])
    deliveries = [
        NewDelivery(
            account_id=batch.account_id,
            kind=DeliveryKind.batch_completed,
            body={
                "event": "batch_completed",
                "account_id": batch.account_id,
                "batch": summary_view(batch, summaries),
            },
            message_id=None,
            ordering_key=f"{webhook_key_prefix(webhook_id)}batch:{batch.id}",
            webhook_id=webhook_id,
        )
        for batch in wanted
        for webhook_id in webhooks[batch.account_id]
    ]
    return write_deliveries(session, deliveries)


@dataclass
class _Summary:
    counts: dict[str, int] = field(default_factory=dict)
    cost_micros: int = 0
    currency: str = ""


def summaries_of(session: Session, batch_ids: list[str]) -> dict[str, _Summary]:
    """Messages per status and their cost (a failed one costs 0), one query for all the batches."""
    rows = session.execute(
        select(
            Message.batch_id,
            Message.status,
            func.count(),
            func.sum(case((Message.status == MessageStatus.failed, 0), else_=Message.cost_micros)),
            func.max(Message.cost_currency),
        )
        .where(Message.batch_id.in_(batch_ids))
        .group_by(Message.batch_id, Message.status)
    )
    found: dict[str, _Summary] = {}
    for batch_id, status, count, cost, currency in rows:
        summary = found.setdefault(batch_id, _Summary())
        summary.counts[MessageStatus(status).value] = count
        summary.cost_micros += int(cost or 0)
        summary.currency = currency or summary.currency
    return found


def summary_view(batch: Batch, summaries: dict[str, _Summary]) -> dict[str, Any]:
    summary = summaries.get(batch.id, _Summary())
    counts = {status.value: summary.counts.get(status.value, 0) for status in MessageStatus}
    return {
        "batch_id": batch.id,
        "channel_id": batch.channel_id,
        "template": template_view(batch),
        "total": batch.total,
        "accepted": batch.accepted,
        "rejected": batch.rejected,
        "counts": {"pending": 0, **counts, "rejected": batch.rejected},
        "cost": {"amount": format_amount(summary.cost_micros), "currency": summary.currency},
        "created_at": isoformat(batch.created_at),
        "completed_at": isoformat(batch.completed_at),
    }
