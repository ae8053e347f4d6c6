"""Sends whose outcome is unknown (claimed, and no answer recorded), and how they end: Meta's status
settles one (`settle_sends`); a dead dispatcher's single sends wait a few seconds for theirs
(`await_status_of_dead`); the rest are released after their grace period (`expired_sends`,
`release_unconfirmed`: sent again only if they certainly did not reach Meta, else failed), or kept as
dead letters when that cannot be stored (`park_release`). The claim and the recorded outcomes are
dispatch/sends.py.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from wagate.bulk.completion import complete_batches
from wagate.core.db import utcnow
from wagate.events.subscriptions import Subscriptions
from wagate.messages.events import publish_status_changes
from wagate.messages.models import Message, MessageStatus
from wagate.messages.status import StatusChange, apply_status
from wagate.outbox.dead_letters import bury
from wagate.outbox.models import JobKind, JobState, OutboxJob, Priority, expired_error
from wagate.outbox.retry import SEND_ORPHANED

UNCONFIRMED_ERROR = "upstream_unconfirmed: WhatsApp neither accepted nor rejected the message"
# Meta posts the `sent` status of a message it accepted within moments of its answer: after a call's
# timeout and this, a dead dispatcher's single send with no status did not reach Meta, or cannot be told.
STATUS_FOLLOWS_SECONDS = 5.0
DEAD_OWNER_ERROR = "its dispatcher died with the send claimed: waiting for WhatsApp's status"


def await_status_of_dead(
    session: Session, dead: Collection[str], *, stored_since: datetime, until: datetime
) -> int:
    """Single sends in flight of dispatchers known dead (outbox/ownership.py), stored since
    `stored_since` (a receiver of Meta's webhooks has run since): `unconfirmed` until `until` instead
    of their lease (75 s by default). Meta's status settles one that reached it
    (`settle_sends`); `release_unconfirmed` fails the rest `upstream_unconfirmed`, never sending one
    again: a call made just before the kill may have reached Meta, and a claim does not say whether it
    was made. A single send is someone waiting now (an OTP): an answer within seconds, delivered or
    failed so that the caller falls back, serves them better than the message a minute late. A batch's
    rows keep their lease and go once after it (decisions/0001). Returns how many were changed."""
    result = session.execute(
        update(OutboxJob)
        .where(
            OutboxJob.locked_by.in_(list(dead)),
            OutboxJob.kind == JobKind.send_message,
            OutboxJob.state == JobState.in_flight,
            OutboxJob.priority == Priority.single,
            OutboxJob.created_at >= stored_since,
            OutboxJob.locked_until > until,
        )
        .values(state=JobState.unconfirmed, locked_until=until, last_error=DEAD_OWNER_ERROR)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def expired_sends(session: Session, *, limit: int = 500) -> list[int]:
    """Send rows `in_flight` past their lease or `unconfirmed` past their grace: for release_unconfirmed."""
    return list(
        session.scalars(
            select(OutboxJob.id)
            .where(
                OutboxJob.kind == JobKind.send_message,
                OutboxJob.state.in_([JobState.in_flight, JobState.unconfirmed]),
                OutboxJob.locked_until < utcnow(),
            )
            .limit(limit)
        )
    )


def release_unconfirmed(
    session: Session,
    job_ids: Sequence[int],
    subscriptions: Subscriptions | None = None,
    *,
    webhooks_before: datetime | None = None,
    receiving_since: datetime | None = None,
    caught_up: datetime | None = None,
) -> int:
    """Settle sends whose outcome stayed unknown past their grace period, with no status webhook.

    `in_flight` past its lease: the process died between recording the attempt and recording the
    answer. Had Meta taken the message, its status webhooks (retried by Meta until we answer) would
    have settled it by now, so it is sent again, a bounded number of times.
    One whose validity period has ended fails `expired: ...` instead of going again.
    `unconfirmed`: Meta answered in a way that leaves it open (timeout, 5xx). It is not sent blindly
    a second time; the message fails with `upstream_unconfirmed`, so a caller polling it (or its
    `after_seconds` callback) can fall back, e.g. to SMS. Returns how many events it wrote.
    Only the rows of `job_ids` (from `expired_sends`) that are still past their time are looked at.

    `webhooks_before`: when the caller applied the stored Meta webhooks it could. A stored webhook
    from before then that still waits (claimed by a process that died, retried after a failure, or
    beyond one batch) may hold the status that settles one of these sends, if it was stored before
    the send's time ran out (`locked_until`: Meta's statuses come within the grace period, which that
    time includes) or before `caught_up` (when the retries of statuses Meta could not deliver while
    no receiving process was up have come: its start, `receiving_since`, plus a grace period). A send
    stored before `receiving_since` is not decided before `caught_up` either: its status may be one of
    those retries; one stored since had a receiver up all along. While one does, the send is
    not decided, neither sent again (Meta would get it twice) nor failed (it may have been
    delivered); it is looked at again on the next round. Webhooks stored later do not hold it back:
    under steady load there is always a newer one waiting, and a dead worker's sends waited for the
    load to end (tests/dispatch/test_scale_out.py: 10 s).
    """
    now = utcnow()
    rows = (
        session.execute(
            select(OutboxJob, Message)
            .join(Message, Message.id == OutboxJob.message_id)
            .where(
                OutboxJob.id.in_(job_ids),
                OutboxJob.state.in_([JobState.in_flight, JobState.unconfirmed]),
                OutboxJob.locked_until < now,
            )
        )
    ).all()
    changes: list[StatusChange] = []
    handed: list[str] = []
    oldest_waiting: datetime | None = None
    asked = False  # once, and only if something is unsettled
    for job, message in rows:
        settled = message.upstream_message_id is not None or message.status is MessageStatus.failed
        missed = receiving_since is None or job.created_at < receiving_since
        if not settled and caught_up is not None and now < caught_up and missed:
            continue
        if not settled and webhooks_before is not None:
            if not asked:
                oldest_waiting, asked = _oldest_waiting_webhook(session, webhooks_before), True
            if oldest_waiting is not None and _could_hold_its_status(oldest_waiting, job, caught_up):
                continue
        resend = job.state is JobState.in_flight and not SEND_ORPHANED.exhausted(job.attempts)
        if not settled and resend and job.expires_at is not None and now >= job.expires_at:
            # Sent again it would be stale (an OTP after an outage): it fails instead.
            change = apply_status(
                message,
                MessageStatus.failed,
                external_error=expired_error(job.payload.get("validity_seconds")),
            )
            if change:
                changes.append(change)
            settled = True
        if not settled and resend:
            job.state = JobState.ready
            job.run_at = now
            job.locked_by = None
            job.locked_until = None
            continue
        if not settled:
            change = apply_status(message, MessageStatus.failed, external_error=UNCONFIRMED_ERROR)
            if change:
                changes.append(change)
        session.delete(job)
        if job.priority == Priority.bulk:
            handed.append(job.message_id or "")
    session.flush()
    events = complete_batches(session, handed, subscriptions) if handed else 0
    return events + publish_status_changes(session, changes, subscriptions)


def _could_hold_its_status(stored_at: datetime, job: OutboxJob, caught_up: datetime | None) -> bool:
    """Whether a webhook stored at `stored_at` may be the status of `job`'s send (see release_unconfirmed)."""
    if job.locked_until is None or caught_up is None:
        return True
    return stored_at < max(job.locked_until, caught_up)


def _oldest_waiting_webhook(session: Session, before: datetime) -> datetime | None:
    """When the oldest Meta webhook stored before `before` and not applied yet was stored."""
    oldest: datetime | None = session.scalar(
        select(func.min(OutboxJob.created_at)).where(
            OutboxJob.kind == JobKind.meta_webhook, OutboxJob.created_at < before
        )
    )
    return oldest


def park_release(session: Session, job_id: int, error: str) -> None:
    """A send whose release cannot be stored (see outbox/isolation.py): kept as a dead letter and taken
    out of the outbox, neither sent again nor failed; its message keeps the status it had."""
    message_id = session.scalar(
        delete(OutboxJob).where(OutboxJob.id == job_id).returning(OutboxJob.message_id)
    )
    bury(session, kind="send_release", reference=message_id, payload={"job_id": job_id}, error=error)


def settle_sends(session: Session, message_ids: list[str]) -> None:
    """A status webhook proved Meta has these messages: their unconfirmed send rows are done (and a
    batch whose last sends they were is complete)."""
    if message_ids:
        settled = session.execute(
            delete(OutboxJob)
            .where(
                OutboxJob.kind == JobKind.send_message,
                OutboxJob.state.in_([JobState.in_flight, JobState.unconfirmed]),
                OutboxJob.message_id.in_(message_ids),
            )
            .returning(OutboxJob.priority, OutboxJob.message_id)
        )
        bulk = [message_id for priority, message_id in settled if priority == Priority.bulk and message_id]
        if bulk:
            complete_batches(session, bulk)
