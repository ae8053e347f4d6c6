"""The delivery job's records: what each attempt did, and what became of the deliveries.

Units of work for the writer, run after the dispatcher's event lane made its HTTP calls (the claim
that comes before them is `wagate.events.delivery_claims`): a round of attempts finishes the delivered
and the hopeless and schedules the rest again, counting each webhook's failures; an attempt that cannot
be recorded is parked, and finished deliveries are forgotten after their retention.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from wagate.audit.models import SYSTEM, AuditAction
from wagate.audit.service import record
from wagate.core.db import isoformat, utcnow
from wagate.core.tables import table_of
from wagate.events.delivery_claims import ClaimedDelivery
from wagate.events.http import PostResult
from wagate.events.models import Delivery, DeliveryAttempt, DeliveryState, Webhook
from wagate.events.publish import cancel_pending
from wagate.outbox.dead_letters import bury
from wagate.outbox.models import OutboxJob, delete_jobs
from wagate.outbox.retry import EVENT_RETRY_WINDOW, RetryPolicy

# The statements of every round of attempts, built once and run on the connection as Core: the ORM's
# entities and its bulk-update path (which prepares to synchronize a session that holds none of these
# rows) cost more than the SQL. Values bound at execution.
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
class Attempted:
    delivery: ClaimedDelivery
    at: datetime
    result: PostResult


@dataclass(frozen=True)
class DisablePolicy:
    after_failures: int
    after_seconds: float


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
