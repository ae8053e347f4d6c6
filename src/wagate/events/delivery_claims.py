"""The claim of due deliveries: the delivery job's rows taken with a lease, and given back at a stop.

A unit of work for the writer; the HTTP calls that follow belong to the dispatcher's event lane, and
what each call did is recorded by `wagate.events.deliveries`. A delivery's outbox row is claimed with a
lease, so one whose process died mid-call is sent again after the lease (a receiver drops the duplicate
by its `webhook-id`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import BindParameter, Integer, Update, bindparam, exists, or_, select, update
from sqlalchemy.orm import Session, aliased

from wagate.core.db import utcnow
from wagate.core.tables import table_of
from wagate.events.models import Delivery, Webhook
from wagate.outbox.models import (
    JobKind,
    JobState,
    OutboxJob,
    bound_claim,
    claim_rows,
    claim_statement,
    delete_jobs,
)

# The statement of every claim, built once and run on the connection as Core: the ORM's entities cost
# more than the SQL. Values bound at execution.
_deliveries = table_of(Delivery)
_webhooks = table_of(Webhook)
_CLAIMED_DELIVERIES = (
    select(
        _deliveries.c.id,
        _deliveries.c.account_id,
        _deliveries.c.webhook_id,
        _deliveries.c.url,
        _deliveries.c.secret_encrypted,
        _deliveries.c.body,
        _deliveries.c.attempts,
        _webhooks.c.url,
        _webhooks.c.secret_encrypted,
        _webhooks.c.enabled,
    )
    .select_from(_deliveries.outerjoin(_webhooks, _webhooks.c.id == _deliveries.c.webhook_id))
    .where(_deliveries.c.id.in_(bindparam("ids", expanding=True)))
)


@dataclass(frozen=True)
class ClaimedDelivery:
    job_id: int
    id: str
    account_id: int
    webhook_id: int | None
    url: str | None  # None: its webhook was deleted or disabled, so it is dropped unsent
    secret_encrypted: str | None
    body: dict[str, Any]
    attempt: int  # this attempt's number, from 1
    # When this round of attempts began (the delivery's creation, or its manual re-delivery): retries
    # go on for EVENT_RETRY_WINDOW from here.
    queued_at: datetime


@dataclass(frozen=True)
class FairShare:
    """How many calls each account may have under way (`share`), and how many it has (`busy`)."""

    share: int
    busy: Mapping[int | None, int]

    def room(self, account_id: int | None) -> int:
        return self.share - self.busy.get(account_id, 0)

    def full(self) -> set[int | None]:
        return {account for account, calls in self.busy.items() if calls >= self.share}

    def claim_limit(self, free: int) -> int:
        """How many rows one claim may take so that no account passes its room, whichever accounts
        the rows turn out to belong to: the least room of an account that still has some (a new one
        has the whole share), within the lane's free calls."""
        rooms = [self.room(account) for account in self.busy if self.room(account) > 0]
        return min(free, self.share, *rooms)


@functools.cache
def _claim_deliveries_statement(leave_out_full: bool, leave_out_none: bool, dialect: str) -> Update:
    """The claim of due deliveries, built once per dialect and shape with its values bound at
    execution (a lane claims on every wake-up). `leave_out_full`: not the rows of the accounts in
    `claim_full`; `leave_out_none`: not the rows of no account (see `claim_deliveries`)."""
    now: BindParameter[Any] = bindparam("claim_now")
    earlier = aliased(OutboxJob)
    due = (
        select(OutboxJob.id)
        .where(
            OutboxJob.kind == JobKind.deliver_event,
            OutboxJob.state == JobState.ready,
            OutboxJob.run_at <= now,
            (OutboxJob.locked_until.is_(None)) | (OutboxJob.locked_until < now),
            or_(
                OutboxJob.ordering_key.is_(None),
                ~exists().where(earlier.ordering_key == OutboxJob.ordering_key, earlier.id < OutboxJob.id),
            ),
        )
        # The (kind, run_at) index yields due rows in this order, so the scan stops at `limit`
        # however long the backlog is; order between messages does not matter, within one the
        # ordering key sees to it.
        .order_by(OutboxJob.run_at)
        .limit(bindparam("claim_limit", type_=Integer))
    )
    if leave_out_full:
        full: BindParameter[Any] = bindparam("claim_full", expanding=True)
        due = due.where(OutboxJob.account_id.is_(None) | OutboxJob.account_id.not_in(full))
    if leave_out_none:
        due = due.where(OutboxJob.account_id.is_not(None))
    return claim_statement(
        dialect,
        due,
        values=bound_claim(),
        returning=(OutboxJob.id, OutboxJob.payload, OutboxJob.created_at),
    )


def claim_deliveries(
    session: Session, *, limit: int, worker_id: str, lease_seconds: float, fair: FairShare | None = None
) -> list[ClaimedDelivery]:
    """Due deliveries, each the oldest pending one of its ordering key, marked as taken.

    With `fair`, no account gets more than its room: an account whose endpoints hang cannot take the
    lane's every call while other accounts' events wait. Accounts already at their share are left
    out of the scan, so their backlog does not hide the others' rows, and one claim takes no more
    than the least room left (`FairShare.claim_limit`), so it stays one statement.
    """
    if fair is not None:
        limit = fair.claim_limit(limit)
    now = utcnow()
    params: dict[str, Any] = {
        "claim_now": now,
        "claim_limit": limit,
        "claim_worker": worker_id,
        "claim_until": now + timedelta(seconds=lease_seconds),
    }
    full = fair.full() if fair is not None else set()
    known = sorted(a for a in full if a is not None)
    if known:
        params["claim_full"] = known
    builder = functools.partial(_claim_deliveries_statement, bool(known), None in full)
    jobs = claim_rows(session, builder, params=params)
    if not jobs:
        return []
    job_of = {payload["delivery_id"]: job_id for job_id, payload, _ in jobs}
    queued_at = {job_id: created_at for job_id, _, created_at in jobs}
    connection = session.connection()
    claimed: list[ClaimedDelivery] = []
    for row in connection.execute(_CLAIMED_DELIVERIES, {"ids": list(job_of)}):
        delivery_id, account_id, webhook_id, own_url, own_secret, body, attempts, *webhook = row
        webhook_url, webhook_secret, enabled = webhook
        if webhook_id is None:
            url, secret = own_url, own_secret
        else:
            url, secret = (webhook_url, webhook_secret) if enabled else (None, None)
        job_id = job_of.pop(delivery_id)
        claimed.append(
            ClaimedDelivery(
                job_id,
                delivery_id,
                account_id,
                webhook_id,
                url,
                secret,
                body,
                attempts + 1,
                queued_at[job_id],
            )
        )
    if job_of:  # rows whose delivery is gone with its webhook or account
        delete_jobs(session, list(job_of.values()))
    return sorted(claimed, key=lambda c: c.job_id)


def release_claims(session: Session, *, worker_id: str) -> int:
    """Deliveries `worker_id` claimed and will not post, for it is stopping: due again at once, their
    attempt not counted, instead of waiting out the claim's lease. What it posted is recorded by now
    (each recorded attempt clears its claim), so only a call cut short by the stop, or a claim no call
    was started for, is left: posted again, at least once as events are."""
    result = session.execute(
        update(OutboxJob)
        .where(OutboxJob.kind == JobKind.deliver_event, OutboxJob.locked_by == worker_id)
        .values(attempts=OutboxJob.attempts - 1, locked_by=None, locked_until=None)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
