"""Meta's stored webhooks as outbox jobs: applied many bodies at a time (`run_webhook_batch`), or as
they are received (`apply_received`, `apply_on_receipt`); a body that fails alone is retried, then
buried (`retry_or_bury`); the bodies of channels this process takes over are due again at once
(`take_over_webhooks`). The outbox's job rows are dispatch/jobs.py."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, update
from sqlalchemy.orm import Session

from wagate.core.db import Database, utcnow
from wagate.core.units import Mergeable
from wagate.dispatch.jobs import ClaimedJob, claim_jobs, fail_jobs, finish_jobs, release_jobs
from wagate.dispatch.unsettled import settle_sends
from wagate.events.subscriptions import Subscriptions
from wagate.messages.meta_updates import WebhooksApplied, process_webhook_bodies
from wagate.messages.pricing import Prices
from wagate.outbox.dead_letters import bury
from wagate.outbox.errors import describe_error
from wagate.outbox.isolation import write_isolating
from wagate.outbox.models import JobKind, OutboxJob

log = logging.getLogger(__name__)

# Webhook bodies are applied many at a time: one query per batch, not per status.
WEBHOOK_BATCH = 500
# A body that failed alone this many times (its retries a second, then two, apart) goes to the dead
# letters: what fails then is its content (a value no column takes, a wamid that is another message's),
# not the moment. An outage of the database buries nothing (see outbox/isolation.py).
WEBHOOK_ATTEMPTS = 3


def take_over_webhooks(session: Session, channel_ids: Collection[int], worker_id: str) -> None:
    """This process has just taken these channels: their webhook bodies claimed by another process
    are due again now. That process no longer sends for the channels (it died, or lost its locks'
    connection), so it will not apply them either, and they must not wait out their lease: an
    orphaned send they would settle waits with them. Should it still apply one, nothing changes twice
    (see WEBHOOK_LEASE_SECONDS)."""
    session.execute(
        update(OutboxJob)
        .where(
            OutboxJob.kind == JobKind.meta_webhook,
            OutboxJob.channel_id.in_(sorted(channel_ids)),
            OutboxJob.locked_by != worker_id,
        )
        .values(locked_by=None, locked_until=None)
    )


def retry_or_bury(session: Session, job: ClaimedJob, error: str) -> None:
    """A body that failed alone: tried again with backoff, or, once it has failed WEBHOOK_ATTEMPTS
    times, moved to the dead letters in the transaction that takes it out of the outbox."""
    if job.attempts < WEBHOOK_ATTEMPTS:
        fail_jobs(session, [job], error)
        return
    log.error(
        "stored Meta webhook %s failed %d times (%s): moved to the dead letters", job.id, job.attempts, error
    )
    bury(
        session,
        kind=JobKind.meta_webhook.value,
        payload=job.payload,
        error=error,
        attempts=job.attempts,
        reference=str(job.id),
    )
    finish_jobs(session, [job.id])


@dataclass
class WebhookBatch:
    """What `run_webhook_batch` did: bodies taken, events caused, and the bodies it still holds."""

    taken: int
    events: int
    statuses: int  # message statuses applied (the metrics' `wagate_status_webhooks_applied`)
    # Claimed, not applied, and not given back because the database went away meanwhile: the caller
    # hands them in again on its next try (they stay locked to this worker for the claim's lease).
    held: list[ClaimedJob]
    templates: int = 0  # templates a lifecycle webhook changed (see WebhooksApplied)


async def run_webhook_batch(
    db: Database,
    *,
    worker_id: str,
    subscriptions: Subscriptions | None = None,
    prices: Prices | None = None,
    held: Sequence[ClaimedJob] = (),
    channels: Collection[int] | None = None,
) -> WebhookBatch:
    """Claim and apply stored Meta webhooks (first those of `held`, still claimed from a try the
    database went away during), and say how it went. `channels`: only the bodies of these channels
    (and those of none).

    The batch is one unit of work; only when it fails is it split, down to the bodies that fail alone
    (about twenty units for one bad body among 500), so the others are applied now, not after its
    retries. When the database goes away mid-way, the bodies are given back (due again at once);
    if even that fails, they are returned in `held`: left claimed, they would wait out their lease
    after the database came back."""

    def claim(session: Session) -> list[ClaimedJob]:
        return claim_jobs(
            session, kind=JobKind.meta_webhook, limit=WEBHOOK_BATCH, worker_id=worker_id, channels=channels
        )

    jobs = list(held) or await db.write(claim)
    if not jobs:
        return WebhookBatch(0, 0, 0, [])

    def apply(session: Session, some: Sequence[ClaimedJob]) -> WebhooksApplied:
        applied = _apply_bodies(session, [job.payload for job in some], subscriptions, prices)
        finish_jobs(session, [job.id for job in some])
        return applied

    # A large unit (see wagate.core.db): on PostgreSQL the batch commits on a connection of its own, so
    # the receiver's stores (a 200 to Meta waits on each) do not queue behind its 30 ms.
    results, unwritten = await write_isolating(db, jobs, apply, retry_or_bury, large=True)
    events = sum(applied.events for applied in results)
    statuses = sum(applied.statuses for applied in results)
    templates = sum(applied.templates for applied in results)
    if unwritten:  # the database went away: nothing is wrong with them, they come again at once
        try:
            await db.write(lambda session: release_jobs(session, [job.id for job in unwritten]))
        except Exception as exc:  # still away: held here, applied first on the next try
            log.warning("could not give back %d Meta webhooks: %s", len(unwritten), describe_error(exc))
            return WebhookBatch(len(jobs), events, statuses, unwritten, templates)
    return WebhookBatch(len(jobs), events, statuses, [], templates)


@dataclass(frozen=True)
class ReceivedBody:
    """A Meta webhook body this process has just stored for one of its channels, kept to be applied
    without a claim (see `apply_received`)."""

    job_id: int
    channel_id: int | None
    body: dict[str, Any]


# The rows of received bodies that no claim holds: a claim's lease (`locked_until`) marks the others.
_DELETE_UNCLAIMED = (
    delete(OutboxJob)
    .where(
        OutboxJob.id.in_(bindparam("job_ids", expanding=True)),
        OutboxJob.locked_until.is_(None) | (OutboxJob.locked_until < bindparam("now")),
    )
    .returning(OutboxJob.id)
)


async def apply_received(
    db: Database, received: Sequence[ReceivedBody], subscriptions: Subscriptions, prices: Prices | None
) -> WebhooksApplied | None:
    """Apply bodies this process stored a moment ago, without claiming them: the transaction that
    applies them deletes their rows, those no claim has taken meanwhile, and applies only the bodies
    of the rows it deleted (a claim that took the others applies them). The claim, a new version of
    each row and its payload read back, was a third of PostgreSQL's work for a status
    (docs/decisions/0003-status-webhooks.md).

    None when the write failed: nothing of it is stored, every row is still there, and
    `run_webhook_batch` claims them with its retries and dead letters, as any stored body."""
    if not received:
        return WebhooksApplied(0, [])

    def apply(session: Session) -> WebhooksApplied:
        job_ids = [item.job_id for item in received]
        params = {"job_ids": job_ids, "now": utcnow()}
        taken = set(session.connection().execute(_DELETE_UNCLAIMED, params).scalars())
        bodies = [item.body for item in received if item.job_id in taken]
        return _apply_bodies(session, bodies, subscriptions, prices)

    try:
        # A large unit, as a claimed batch is (see `run_webhook_batch`).
        applied: WebhooksApplied = await db.write(apply, large=True)
    except Exception as exc:
        log.warning(
            "%d Meta webhooks could not be applied as received; they are claimed instead: %s",
            len(received),
            describe_error(exc),
        )
        return None
    return applied


def _apply_bodies(
    session: Session, bodies: list[dict[str, Any]], subscriptions: Subscriptions | None, prices: Prices | None
) -> WebhooksApplied:
    applied = process_webhook_bodies(session, bodies, subscriptions, prices=prices)
    settle_sends(session, applied.settled)
    return applied


@dataclass(frozen=True)
class _Received:
    body: dict[str, Any]
    subscriptions: Subscriptions
    prices: Prices | None


def _apply_received(session: Session, received: list[_Received]) -> list[WebhooksApplied]:
    """Bodies that came in together (they share a batch: see `Mergeable`), applied at once. The
    batch's counts go to its first body and the others count nothing, so they add up however a batch
    is split."""
    first = received[0]
    applied = _apply_bodies(session, [item.body for item in received], first.subscriptions, first.prices)
    return [applied, *(WebhooksApplied(0, []) for _ in received[1:])]


def apply_on_receipt(
    body: dict[str, Any], subscriptions: Subscriptions, prices: Prices | None
) -> Mergeable[WebhooksApplied]:
    """The unit of work that applies a Meta webhook body as it is received (see
    `Dispatcher.apply_webhook`); bodies under the same subscriptions share their batch's statements."""
    return Mergeable(id(subscriptions), _Received(body, subscriptions, prices), _apply_received)
