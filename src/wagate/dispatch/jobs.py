"""Background jobs: the outbox's job rows (claimed, finished, failed, released; those of dead
processes), and the periodic jobs (template sync, purges). Each handler is a plain function. Meta's
stored webhooks, which are jobs too, are applied by dispatch/webhook_jobs.py."""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import BindParameter, Integer, Update, bindparam, select, update
from sqlalchemy.orm import Session

from wagate.accounts.sign_in_limits import purge_stale_counters
from wagate.bulk.service import purge_expired_batches
from wagate.channels.models import Channel
from wagate.core.db import Database, utcnow
from wagate.core.security import SecretBox
from wagate.events.deliveries import purge_finished
from wagate.idempotency.service import purge_expired as purge_idempotency_keys
from wagate.messages.parked import PARKED_STATUS_MAX_AGE, purge_parked_statuses
from wagate.outbox.models import (
    JobKind,
    JobState,
    OutboxJob,
    Priority,
    bound_claim,
    claim_rows,
    claim_statement,
    delete_jobs,
)
from wagate.outbox.retry import BACKGROUND
from wagate.templates.service import replace_templates
from wagate.whatsapp.client import CloudApiClient

log = logging.getLogger(__name__)

PURGE_INTERVAL = timedelta(hours=1)
# How long a claim of stored Meta webhooks holds. Applying a batch takes well under a second; a body
# claimed by a process that died waits this long (its statuses, and the resend or failure of an
# orphaned send they would settle, wait with it: see unsettled.release_unconfirmed). Applied twice after a
# stall longer than this, a body changes nothing: statuses only move forward, and a customer message
# whose wamid is stored already is not stored again.
WEBHOOK_LEASE_SECONDS = 30.0
# Periodic jobs (a template sync calls Meta, page by page).
JOB_LEASE_SECONDS = 300.0


@dataclass(frozen=True)
class ClaimedJob:
    id: int
    kind: JobKind
    payload: dict[str, Any]
    attempts: int


@functools.cache
def _claim_jobs_statement(by_channel: bool, dialect: str) -> Update:
    now: BindParameter[Any] = bindparam("claim_now")
    due = (
        select(OutboxJob.id)
        .where(
            OutboxJob.kind == bindparam("claim_kind"),
            OutboxJob.state == JobState.ready,
            OutboxJob.run_at <= now,
            (OutboxJob.locked_until.is_(None)) | (OutboxJob.locked_until < now),
        )
        .order_by(OutboxJob.id)
        .limit(bindparam("claim_limit", type_=Integer))
    )
    if by_channel:
        channels: BindParameter[Any] = bindparam("claim_channels", expanding=True)
        due = due.where(OutboxJob.channel_id.is_(None) | OutboxJob.channel_id.in_(channels))
    return claim_statement(
        dialect,
        due,
        values=bound_claim(),
        returning=(OutboxJob.id, OutboxJob.kind, OutboxJob.payload, OutboxJob.attempts),
    )


def claim_jobs(
    session: Session,
    *,
    kind: JobKind,
    limit: int,
    worker_id: str,
    lease_seconds: float | None = None,
    channels: Collection[int] | None = None,
) -> list[ClaimedJob]:
    """Take up to `limit` due jobs of `kind`, oldest first; `channels`: only those of these channels
    and those of none."""
    if lease_seconds is None:
        lease_seconds = WEBHOOK_LEASE_SECONDS if kind is JobKind.meta_webhook else JOB_LEASE_SECONDS
    now = utcnow()
    params: dict[str, Any] = {
        "claim_kind": kind,
        "claim_now": now,
        "claim_limit": limit,
        "claim_worker": worker_id,
        "claim_until": now + timedelta(seconds=lease_seconds),
    }
    if channels is not None:
        params["claim_channels"] = sorted(channels)
    rows = claim_rows(session, functools.partial(_claim_jobs_statement, channels is not None), params=params)
    return sorted((ClaimedJob(r[0], JobKind(r[1]), r[2], r[3]) for r in rows), key=lambda j: j.id)


def finish_jobs(session: Session, job_ids: list[int]) -> None:
    delete_jobs(session, job_ids)


def fail_jobs(session: Session, jobs: list[ClaimedJob], error: str) -> None:
    """Try again later with backoff; never drop a job (a stored webhook body is data we owe)."""
    now = utcnow()
    for job in jobs:
        session.execute(
            update(OutboxJob)
            .where(OutboxJob.id == job.id)
            .values(
                run_at=now + timedelta(seconds=BACKGROUND.delay(job.attempts)),
                locked_by=None,
                locked_until=None,
                last_error=error[:1000],
            )
        )


def release_jobs(session: Session, job_ids: list[int]) -> None:
    """Claimed jobs that were not run for a reason of the moment (the database went away): due again
    now, their attempt not counted."""
    if job_ids:
        session.execute(
            update(OutboxJob)
            .where(OutboxJob.id.in_(job_ids))
            .values(attempts=OutboxJob.attempts - 1, locked_by=None, locked_until=None, run_at=utcnow())
        )


def claimed_by(session: Session, now: datetime) -> set[str]:
    """Every process that holds outbox rows under a lease that still runs (`locked_by`)."""
    owners = session.scalars(
        select(OutboxJob.locked_by)
        .where(OutboxJob.locked_by.is_not(None), OutboxJob.locked_until > now)
        .distinct()
    )
    return {owner for owner in owners if owner}


def release_dead_owners(session: Session, dead: Collection[str], *, now: datetime) -> int:
    """The rows of dispatchers known dead (their locks' session is gone: outbox/ownership.py) that may
    be taken at once instead of after their leases: stored Meta webhooks, event deliveries and reports
    (applied again, posted again with the same `webhook-id`: both allowed). Not its sends: one in
    flight at the kill may have reached Meta, whose status can come as late as the upstream timeout
    plus the grace period after the claim; sent again a grace period after the kill, the crash matrix
    saw sends go twice (4 of 300, serve and worker killed). See unsettled.await_status_of_dead."""
    result = session.execute(
        update(OutboxJob)
        .where(
            OutboxJob.locked_by.in_(list(dead)),
            OutboxJob.locked_until > now,
            OutboxJob.kind != JobKind.send_message,
        )
        .values(locked_until=now)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


async def sync_channel_templates(
    db: Database, *, channel_id: int, client: CloudApiClient, secret_box: SecretBox
) -> int:
    """Fetch the channel's templates from its WhatsApp Business Account and store them."""
    async with db.read() as reader:
        channel = await reader.get(Channel, channel_id)
    if channel is None:
        return 0
    records = await client.list_templates(channel.waba_id, secret_box.decrypt(channel.access_token_encrypted))

    def store(session: Session) -> int:
        fresh = session.get(Channel, channel_id)
        if fresh is None:
            return 0
        return replace_templates(session, channel=fresh, records=records)

    count: int = await db.write(store)
    return count


def schedule_template_sync(channel_id: int, *, delay_seconds: float = 0.0) -> OutboxJob:
    return OutboxJob(
        kind=JobKind.sync_templates,
        priority=Priority.background,
        payload={"channel_id": channel_id},
        run_at=utcnow() + timedelta(seconds=delay_seconds),
    )


def ensure_periodic_jobs(session: Session, *, template_sync_interval: float) -> None:
    """Periodic work is rows too: make sure each exists once (a fresh database, a new channel)."""
    payloads = session.scalars(select(OutboxJob.payload).where(OutboxJob.kind == JobKind.sync_templates))
    scheduled_ids = {p.get("channel_id") for p in payloads}
    for channel_id, synced_at in (session.execute(select(Channel.id, Channel.templates_synced_at))).all():
        if channel_id not in scheduled_ids:
            delay = 0.0
            if synced_at is not None:
                delay = max(
                    0.0, (synced_at + timedelta(seconds=template_sync_interval) - utcnow()).total_seconds()
                )
            session.add(schedule_template_sync(channel_id, delay_seconds=delay))
    has_purge = session.scalar(select(OutboxJob.id).where(OutboxJob.kind == JobKind.purge_expired).limit(1))
    if has_purge is None:
        session.add(OutboxJob(kind=JobKind.purge_expired, priority=Priority.background, payload={}))
    session.flush()


async def run_periodic_job(
    db: Database,
    job: ClaimedJob,
    *,
    client: CloudApiClient,
    secret_box: SecretBox,
    template_sync_interval: float,
    delivery_retention: timedelta,
) -> None:
    """Run one sync or purge and put the next one in its place, in the same transaction as the finish."""
    if job.kind is JobKind.sync_templates:
        channel_id = int(job.payload["channel_id"])
        await sync_channel_templates(db, channel_id=channel_id, client=client, secret_box=secret_box)
        next_job = schedule_template_sync(channel_id, delay_seconds=template_sync_interval)
    else:

        def purge(session: Session) -> None:
            purge_idempotency_keys(session)
            while purge_expired_batches(session):
                pass

        await db.write(purge)
        older_than = utcnow() - delivery_retention
        # In slices, so that a large backlog never makes one long transaction.
        while await db.write(lambda session: purge_finished(session, older_than=older_than)):
            pass
        now = utcnow()
        while await db.write(lambda session: purge_stale_counters(session, now)):
            pass
        parked_before = utcnow() - PARKED_STATUS_MAX_AGE
        while await db.write(lambda session: purge_parked_statuses(session, older_than=parked_before)):
            pass
        next_job = OutboxJob(
            kind=JobKind.purge_expired,
            priority=Priority.background,
            payload={},
            run_at=utcnow() + PURGE_INTERVAL,
        )

    def reschedule(session: Session) -> None:
        finish_jobs(session, [job.id])
        session.add(next_job)
        session.flush()

    await db.write(reschedule)
