"""The delivery job: claim due deliveries, and record what each attempt did.

Both are units of work for the writer; the HTTP calls between them belong to the dispatcher's
event lane. A delivery's outbox row is claimed with a lease, so one whose process died mid-call is
sent again after the lease (a receiver drops the duplicate by its `webhook-id`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import BindParameter, Integer, Update, bindparam, delete, exists, insert, or_, select, update
from sqlalchemy.orm import Session, aliased

from wagate.audit.models import SYSTEM, AuditAction
from wagate.audit.service import record
from wagate.core.db import isoformat, utcnow
from wagate.core.tables import table_of
from wagate.events.http import PostResult
from wagate.events.models import Delivery, DeliveryAttempt, DeliveryState, Webhook
from wagate.events.publish import cancel_pending
from wagate.outbox.dead_letters import bury
from wagate.outbox.models import JobKind, JobState, OutboxJob, claim_rows, claim_statement, delete_jobs
from wagate.outbox.retry import EVENT_RETRY_WINDOW, RetryPolicy

_INSERT_ATTEMPT = insert(table_of(DeliveryAttempt))
_deliveries = table_of(Delivery)
_outbox = table_of(OutboxJob)
_SET_STATE = (
    _deliveries.update()
    .where(_deliveries.c.id == bindparam("delivery"))
    .values(state=bindparam("state"), attempts=bindparam("attempts"), finished_at=bindparam("finished_at"))
)
_RESCHEDULE = (
    _outbox.update()
    .where(_outbox.c.id == bindparam("job"))
    .values(run_at=bindparam("run_at"), last_error=bindparam("error"), locked_by=None, locked_until=None)
)
# The statements of every claim and every round of attempts, built once and run on the connection as
# Core: the ORM's entities and its bulk-update path (which prepares to synchronize a session that
# holds none of these rows) cost more than the SQL. Values bound at execution.
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
_EXISTING_DELIVERIES = select(_deliveries.c.id).where(_deliveries.c.id.in_(bindparam("ids", expanding=True)))
_FINISH_ROUND = (
    _deliveries.update()
    .where(_deliveries.c.id.in_(bindparam("ids", expanding=True)))
    .values(
        state=bindparam("state"), attempts=_deliveries.c.attempts + 1, finished_at=bindparam("finished_at")
    )
)
GONE = 410


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
class Attempted:
    delivery: ClaimedDelivery
    at: datetime
    result: PostResult


@dataclass(frozen=True)
class DisablePolicy:
    after_failures: int
    after_seconds: float


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
        values={
            "attempts": OutboxJob.attempts + 1,
            "locked_by": bindparam("claim_worker"),
            "locked_until": bindparam("claim_until"),
        },
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


def record_attempts(
    session: Session, attempts: list[Attempted], *, retry: RetryPolicy, disable: DisablePolicy
) -> None:
    """Store a round of attempts: finish the delivered and the hopeless, schedule the rest again."""
    # A delivery can go with its webhook (deleted while the call was under way): nothing to record.
    connection = session.connection()
    ids = list({a.delivery.id for a in attempts})
    existing = set(connection.execute(_EXISTING_DELIVERIES, {"ids": ids}).scalars())
    gone = [a.delivery.job_id for a in attempts if a.delivery.id not in existing]
    delete_jobs(session, gone)
    attempts = [a for a in attempts if a.delivery.id in existing]
    if not attempts:
        return
    now = utcnow()
    connection.execute(
        _INSERT_ATTEMPT,
        [
            {
                "delivery_id": a.delivery.id,
                "attempted_at": a.at,
                "status_code": a.result.status_code,
                "latency_ms": a.result.latency_ms,
                "error": a.result.error,
                "response": a.result.response,
                "succeeded": a.result.succeeded,
            }
            for a in attempts
        ],
    )
    by_state: dict[DeliveryState, list[ClaimedDelivery]] = {state: [] for state in DeliveryState}
    again: list[dict[str, Any]] = []
    for a in attempts:
        d = a.delivery
        if a.result.succeeded:
            by_state[DeliveryState.delivered].append(d)
        elif a.result.status_code == GONE or (now - d.queued_at).total_seconds() >= EVENT_RETRY_WINDOW:
            by_state[DeliveryState.failed].append(d)
        else:
            by_state[DeliveryState.pending].append(d)
            delay = timedelta(seconds=retry.delay(d.attempt))
            again.append({"job": d.job_id, "run_at": now + delay, "error": a.result.error})
    # One statement per outcome, not one per delivery: each claimed delivery had exactly one attempt.
    for state, group in by_state.items():
        if group:
            connection.execute(
                _FINISH_ROUND,
                {
                    "ids": [d.id for d in group],
                    "state": state,
                    "finished_at": None if state is DeliveryState.pending else now,
                },
            )
    if again:
        connection.execute(_RESCHEDULE, again)
    delete_jobs(
        session, [d.job_id for d in by_state[DeliveryState.delivered] + by_state[DeliveryState.failed]]
    )
    _track_webhook_health(session, [a for a in attempts if a.delivery.webhook_id is not None], disable, now)


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


def park_attempt(session: Session, attempt: Attempted, error: str) -> None:
    """An attempt that cannot be recorded (see outbox/isolation.py): kept as a dead letter; its
    delivery is given up, so it is neither posted again and again nor left pending for ever."""
    d = attempt.delivery
    bury(
        session,
        kind="event_attempt",
        reference=d.id,
        payload={
            "delivery_id": d.id,
            "job_id": d.job_id,
            "attempt": d.attempt,
            "status_code": attempt.result.status_code,
            "error": attempt.result.error,
        },
        error=error,
        attempts=d.attempt,
    )
    session.execute(delete(OutboxJob).where(OutboxJob.id == d.job_id))
    session.execute(
        update(Delivery).where(Delivery.id == d.id).values(state=DeliveryState.failed, finished_at=utcnow())
    )


def park_report(session: Session, job_id: int, error: str) -> None:
    """A due `after_seconds` report that cannot be rendered: kept as a dead letter, out of the outbox."""
    message_id = session.scalar(
        delete(OutboxJob).where(OutboxJob.id == job_id).returning(OutboxJob.message_id)
    )
    bury(session, kind="status_report", reference=message_id, payload={"job_id": job_id}, error=error)


def drop_undeliverable(session: Session, deliveries: list[ClaimedDelivery]) -> None:
    """Deliveries whose webhook was disabled meanwhile: failed, without an attempt."""
    if not deliveries:
        return
    now = utcnow()
    session.connection().execute(
        _SET_STATE,
        [
            {"delivery": d.id, "state": DeliveryState.failed, "attempts": d.attempt - 1, "finished_at": now}
            for d in deliveries
        ],
    )
    session.execute(delete(OutboxJob).where(OutboxJob.id.in_([d.job_id for d in deliveries])))


def _track_webhook_health(
    session: Session, attempts: list[Attempted], disable: DisablePolicy, now: datetime
) -> None:
    """Count each webhook's run of failures; disable it when the run is long, or at once on 410."""
    if not attempts:
        return
    disabled: list[int] = []
    webhooks = {
        w.id: w
        for w in session.scalars(
            select(Webhook).where(Webhook.id.in_({a.delivery.webhook_id for a in attempts}))
        )
    }
    for a in sorted(attempts, key=lambda a: a.at):
        webhook = webhooks.get(a.delivery.webhook_id or 0)
        if webhook is None:
            continue
        if a.result.succeeded:
            webhook.consecutive_failures = 0
            webhook.failing_since = None
            continue
        webhook.consecutive_failures += 1
        webhook.failing_since = webhook.failing_since or a.at
        if not webhook.enabled:
            continue
        if a.result.status_code == GONE:
            reason = f"Disabled at {isoformat(now)}: the endpoint answered 410 Gone."
        elif (
            webhook.consecutive_failures >= disable.after_failures
            and (now - webhook.failing_since).total_seconds() >= disable.after_seconds
        ):
            reason = (
                f"Disabled at {isoformat(now)} after {webhook.consecutive_failures} failed attempts in a row "
                f"since {isoformat(webhook.failing_since)}; the last one: {a.result.error}."
            )[:500]
        else:
            continue
        disabled.append(webhook.id)
        webhook.enabled = False
        webhook.disabled_reason = reason
        record(
            session,
            SYSTEM,
            account_id=webhook.account_id,
            action=AuditAction.webhook_disabled,
            target_type="webhook",
            target_id=webhook.id,
            changes={"reason": reason},
        )
    session.flush()
    cancel_pending(session, disabled)


def purge_finished(session: Session, *, older_than: datetime, limit: int = 10_000) -> int:
    """Forget up to `limit` deliveries (and their attempts) finished before `older_than`."""
    ids = list(session.scalars(select(Delivery.id).where(Delivery.finished_at < older_than).limit(limit)))
    if ids:
        session.execute(delete(DeliveryAttempt).where(DeliveryAttempt.delivery_id.in_(ids)))
        session.execute(delete(Delivery).where(Delivery.id.in_(ids)))
    return len(ids)
