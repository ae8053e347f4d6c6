"""The claim of a channel's due sends, which is their attempt record (see dispatch/sends.py), and what a
lane does with the rows it holds: gives back those it never sent (`unclaim`), keeps its lease on the
rest (`renew_leases`)."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from sqlalchemy import Integer, Update, bindparam, literal_column, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from wagate.core.db import utcnow
from wagate.core.tables import UTCDateTime
from wagate.outbox.models import (
    ClaimedSend,
    JobState,
    OutboxJob,
    Priority,
    bound_claim,
    claim_rows,
    claim_statement,
)

ZERO_INTERVAL: ColumnElement[Any] = literal_column("interval '0 seconds'")


@functools.cache
def _claim_sends_statement(singles_only: bool, dialect: str) -> Update:
    # The channel's sends are its rows of a priority better than background (see `Priority`), named
    # so rather than by `kind`: every condition is then on `ix_outbox_due`, which gives the rows in
    # the claim's order, and no other index can serve the claim. Named by kind, the claim was
    # planned by the outbox's statistics, which for a queue are always stale (taken when it held
    # two rows, while 2,000 wait now), and PostgreSQL read `ix_outbox_kind_due` instead: every due
    # send of every channel read and sorted, 8-28 ms a claim (docs/decisions/0004-outbox-claims.md).
    # `run_at`, the one condition not on `ix_outbox_due`, is the second column of
    # `ix_outbox_kind_due`, and PostgreSQL can scan that index by its second column alone. A drained
    # outbox's statistics know only the periodic jobs, due an hour ahead, so `run_at <= now` looked
    # like no row at all and the claim read every due row of the outbox that way (3.9 ms a claim in
    # the send benchmark; docs/decisions/0004-outbox-claims.md). Plus a zero interval, no index
    # matches it: it only filters the rows `ix_outbox_due` gives.
    run_at = OutboxJob.run_at + ZERO_INTERVAL if dialect == "postgresql" else OutboxJob.run_at
    best = Priority.single if singles_only else Priority.bulk
    due = (
        select(OutboxJob.id)
        .where(
            OutboxJob.channel_id == bindparam("claim_channel"),
            OutboxJob.state == JobState.ready,
            OutboxJob.priority <= best,
            run_at <= bindparam("claim_now", type_=UTCDateTime()),
        )
        .order_by(OutboxJob.priority, OutboxJob.id)
        .limit(bindparam("claim_limit", type_=Integer))
    )
    return claim_statement(
        dialect,
        due,
        values={"state": JobState.in_flight, **bound_claim()},
        returning=(
            OutboxJob.id,
            OutboxJob.message_id,
            OutboxJob.payload,
            OutboxJob.attempts,
            OutboxJob.priority,
            OutboxJob.expires_at,
        ),
    )


def claim_sends(
    session: Session,
    *,
    channel_id: int,
    limit: int,
    worker_id: str,
    lease_seconds: float,
    singles_only: bool = False,
) -> list[ClaimedSend]:
    """Take up to `limit` due sends of the channel, best priority first, and record the attempt."""
    now = utcnow()
    rows = claim_rows(
        session,
        functools.partial(_claim_sends_statement, singles_only),
        params={
            "claim_channel": channel_id,
            "claim_now": now,
            "claim_limit": limit,
            "claim_worker": worker_id,
            "claim_until": now + timedelta(seconds=lease_seconds),
        },
    )
    claimed = [
        ClaimedSend(
            r[0], r[1], r[2]["body"], r[3], r[4], r[5], r[2].get("validity_seconds"), r[2].get("request_id")
        )
        for r in rows
    ]
    return sorted(claimed, key=lambda c: (c.priority, c.job_id))


def unclaim(session: Session, job_ids: list[int]) -> None:
    """Rows claimed ahead that were never sent (the lane stopped): ready again for any worker."""
    session.execute(
        update(OutboxJob)
        .where(OutboxJob.id.in_(job_ids), OutboxJob.state == JobState.in_flight)
        .values(state=JobState.ready, attempts=OutboxJob.attempts - 1, locked_by=None, locked_until=None)
    )


def renew_leases(session: Session, *, job_ids: list[int], worker_id: str, lease_seconds: float) -> set[int]:
    """Extend the lease of sends a lane still holds; returns those it still owns.

    A row waiting in a lane (claimed ahead, under way, or its outcome not yet recorded) would
    otherwise look orphaned once its lease ran out, and `release_unconfirmed` would hand it out again.
    """
    if not job_ids:
        return set()
    renewed = session.execute(
        update(OutboxJob)
        .where(
            OutboxJob.id.in_(job_ids),
            OutboxJob.state == JobState.in_flight,
            OutboxJob.locked_by == worker_id,
        )
        .values(locked_until=utcnow() + timedelta(seconds=lease_seconds))
        .returning(OutboxJob.id)
    )
    return set(renewed.scalars())
