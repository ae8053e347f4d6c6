"""The SQL of bulk batches: storing one whole, reading its recipients' states, counting its waiting
sends, purging it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Exists, and_, case, delete, exists, func, insert, literal, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.bulk.completion import WAITING, publish_completed
from wagate.bulk.models import Batch, BatchRecipient, BatchStatus, PreparedBatch
from wagate.core.db import utcnow
from wagate.core.tables import table_of
from wagate.messages.models import Message
from wagate.outbox.models import JobKind, OutboxJob, Priority

RETENTION = timedelta(days=7)
_INSERT_RECIPIENTS = insert(table_of(BatchRecipient))


def store_batch(session: Session, batch: PreparedBatch) -> Batch:
    """The batch and its recipients (its messages are stored beside, by `bulk.service.accept_batch`);
    a batch that accepted no recipient is complete at once, and says so."""
    now = utcnow()
    template = batch.template.template
    accepted = len(batch.sends)
    row = Batch(
        id=batch.batch_id,
        account_id=batch.account_id,
        channel_id=batch.channel_id,
        template_name=template.name,
        template_language=template.language,
        template_category=template.category,
        status=BatchStatus.processing if accepted else BatchStatus.completed,
        total=len(batch.recipients),
        accepted=accepted,
        rejected=len(batch.recipients) - accepted,
        created_at=now,
        completed_at=None if accepted else now,
        expires_at=now + RETENTION,
    )
    session.add(row)
    session.flush()
    session.connection().execute(
        _INSERT_RECIPIENTS,
        [
            {
                "batch_id": batch.batch_id,
                "position": position,
                "phone_number": number,
                "message_id": message_id,
                "error": error,
            }
            for position, (number, message_id, error) in enumerate(batch.recipients)
        ],
    )
    if not accepted:
        publish_completed(session, [row], batch.subscriptions)
    return row


async def bulk_sends_waiting(session: AsyncSession, *, channel_id: int, up_to: int) -> int:
    """The channel's bulk sends not yet handed to Meta, counted no further than `up_to`: a large
    backlog costs one bounded index scan."""
    waiting_rows = (
        select(OutboxJob.id)
        .where(
            OutboxJob.channel_id == channel_id,
            OutboxJob.state.in_(WAITING),
            OutboxJob.priority == Priority.bulk,
        )
        .limit(up_to)
        .subquery()
    )
    return await session.scalar(select(func.count()).select_from(waiting_rows)) or 0


async def live_batch(session: AsyncSession, *, account_id: int, batch_id: str, now: datetime) -> Batch | None:
    found: Batch | None = await session.scalar(
        select(Batch).where(Batch.id == batch_id, Batch.account_id == account_id, Batch.expires_at > now)
    )
    return found


def _send_waiting() -> Exists:
    """Whether the message's send still waits to be handed to Meta (the batch shows it `pending`)."""
    return exists().where(
        OutboxJob.message_id == Message.id,
        OutboxJob.kind == JobKind.send_message,
        OutboxJob.state.in_(WAITING),
    )


async def recipient_rows(session: AsyncSession, *, batch_id: str) -> list[Any]:
    """Each recipient in request order: (number, message id, rejection, message status, Meta's error,
    whether its send still waits to be handed to Meta)."""
    waiting = _send_waiting()
    rows = await session.execute(
        select(
            BatchRecipient.phone_number,
            BatchRecipient.message_id,
            BatchRecipient.error,
            Message.status,
            Message.external_error,
            waiting,
        )
        .outerjoin(Message, and_(Message.id == BatchRecipient.message_id))
        .where(BatchRecipient.batch_id == batch_id)
        .order_by(BatchRecipient.position)
    )
    return list(rows)


def purge_expired_batches(session: Session, *, limit: int = 100) -> int:
    """Batches past their 7 days: gone with their recipient rows (their messages stay)."""
    expired = list(session.scalars(select(Batch.id).where(Batch.expires_at <= utcnow()).limit(limit)))
    if expired:
        session.execute(delete(BatchRecipient).where(BatchRecipient.batch_id.in_(expired)))
        session.execute(delete(Batch).where(Batch.id.in_(expired)))
    return len(expired)


async def batches_page(
    session: AsyncSession,
    *,
    account_id: int,
    channel_ids: list[int],
    before: str | None,
    limit: int,
    now: datetime,
) -> list[Batch]:
    """The account's live batches on these channels, newest first (batch ids are time-ordered, so the
    id alone pages them)."""
    if not channel_ids:
        return []
    query = select(Batch).where(
        Batch.account_id == account_id, Batch.channel_id.in_(channel_ids), Batch.expires_at > now
    )
    if before is not None:
        query = query.where(Batch.id < before)
    return list(await session.scalars(query.order_by(Batch.id.desc()).limit(limit)))


async def batch_progress(session: AsyncSession, *, batch_ids: list[str]) -> dict[str, dict[str, int]]:
    """Each batch's messages by state, as `read_batch` counts them, in one statement: `pending` (not yet
    handed to Meta), else the message's status."""
    if not batch_ids:
        return {}
    state = case((_send_waiting(), literal("pending")), else_=Message.status)
    rows = await session.execute(
        select(Message.batch_id, state, func.count())
        .where(Message.batch_id.in_(batch_ids))
        .group_by(Message.batch_id, state)
    )
    progress: dict[str, dict[str, int]] = {}
    for batch_id, shown, count in rows:
        progress.setdefault(batch_id, {})[str(shown)] = count
    return progress
