"""The send job: claim a channel's due sends, call the Cloud API, record what happened.

The claim is the attempt record: it marks the rows `in_flight` and commits before any HTTP call, so a
process killed mid-call leaves rows whose outcome is unknown rather than rows that look unsent. Meta's
status webhooks carry our message id in `biz_opaque_callback_data`, so whichever of them arrives settles
such a row (`settle_sends`); what the grace period does with one that stays unsettled is in
`release_unconfirmed`. Only a send that certainly did not reach Meta is retried at once.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Integer,
    Select,
    Update,
    any_,
    bindparam,
    case,
    delete,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from wagate.bulk.completion import complete_batches
from wagate.channels import service as channels
from wagate.channels.service import pause_channel
from wagate.core.db import UTCDateTime, dialect_name, table_of, utcnow
from wagate.events.subscriptions import Subscriptions
from wagate.messages.events import publish_status_changes
from wagate.messages.meta_updates import apply_parked_rows, apply_parked_statuses, parked_statuses_for
from wagate.messages.models import Message, MessageStatus
from wagate.messages.pricing import Prices
from wagate.messages.status import StatusChange, apply_status
from wagate.outbox.dead_letters import bury
from wagate.outbox.models import (
    ClaimedSend,
    JobKind,
    JobState,
    OutboxJob,
    Priority,
    claim_rows,
    claim_statement,
    delete_jobs,
    expired_error,
)
from wagate.outbox.retry import SEND_NOT_DELIVERED, SEND_ORPHANED

_messages = table_of(Message)
# The column's length (messages.upstream_status): a longer word from Meta is cut, not a failed write.
UPSTREAM_STATUS_LENGTH = 40


def _upstream_status(given: Any) -> Any:
    """What Meta answered the send with when it did not simply accept it (`held_for_quality_assessment`,
    API.md section 14). Only while the message has no wamid yet: one a status webhook already gave
    it has been moved on by that status, which clears the field."""
    return case((_messages.c.upstream_message_id.is_(None), given), else_=_messages.c.upstream_status)


_SET_WAMID = (
    _messages.update()
    .where(_messages.c.id == bindparam("message"))
    .values(upstream_message_id=bindparam("wamid"), upstream_status=_upstream_status(bindparam("held")))
)
_outbox = table_of(OutboxJob)


@functools.cache
def _sent_round() -> Select[Any]:
    """PostgreSQL: what `record_outcomes` does first for a round's sends that Meta took, in one
    statement: each message gets its wamid (`_SET_WAMID`), the finished outbox rows go
    (`delete_jobs`; those of sends Meta refused too), and the statuses parked for the wamids are
    read. Data-modifying CTEs run whether or not the query reads them."""
    wamids = bindparam("wamids", type_=postgresql.ARRAY(_messages.c.upstream_message_id.type))
    messages = bindparam("messages", type_=postgresql.ARRAY(_messages.c.id.type))
    held = bindparam("held", type_=postgresql.ARRAY(_messages.c.upstream_status.type))
    sent = func.unnest(messages, wamids, held).table_valued("message", "wamid", "held").render_derived()
    set_wamids = (
        _messages.update()
        .where(_messages.c.id == sent.c.message)
        .values(upstream_message_id=sent.c.wamid, upstream_status=_upstream_status(sent.c.held))
        .cte("set_wamids")
    )
    jobs = bindparam("jobs", type_=postgresql.ARRAY(_outbox.c.id.type))
    finished = delete(_outbox).where(_outbox.c.id == any_(jobs)).cte("finished")
    return parked_statuses_for(wamids).add_cte(set_wamids, finished)


# A round's sends to try again, and those whose outcome is unknown: one executemany each, not a
# statement per send (a 130429 storm returns a whole round at once).
_RETRY_LATER = (
    _outbox.update()
    .where(_outbox.c.id == bindparam("job"))
    .values(
        state=JobState.ready,
        run_at=bindparam("run_at"),
        last_error=bindparam("error"),
        locked_by=None,
        locked_until=None,
    )
)
_AWAIT_WEBHOOK = (
    _outbox.update()
    .where(_outbox.c.id == bindparam("job"))
    .values(state=JobState.unconfirmed, last_error=bindparam("error"), locked_until=bindparam("until"))
)
UNCONFIRMED_ERROR = "upstream_unconfirmed: WhatsApp neither accepted nor rejected the message"
# Meta posts the `sent` status of a message it accepted within moments of its answer: after a call's
# timeout and this, a dead dispatcher's single send with no status did not reach Meta, or cannot be told.
STATUS_FOLLOWS_SECONDS = 5.0
DEAD_OWNER_ERROR = "its dispatcher died with the send claimed: waiting for WhatsApp's status"


@dataclass(frozen=True)
class Sent:
    send: ClaimedSend
    wamid: str
    # Meta's `message_status` when not `accepted`: `held_for_quality_assessment` under template
    # pacing. Not a failure, and never a reason to send again.
    upstream_status: str | None = None


@dataclass(frozen=True)
class Retry:
    """Meta certainly did not get it (connection refused, throttled): safe to send again later."""

    send: ClaimedSend
    error: str


@dataclass(frozen=True)
class Unknown:
    """Meta may have it (timeout after sending, 5xx): wait for a status webhook before anything else."""

    send: ClaimedSend
    error: str


@dataclass(frozen=True)
class Rejected:
    send: ClaimedSend
    external_error: str


@dataclass(frozen=True)
class Held:
    """Meta refused the channel itself (its token, its account): the send waits, uncounted, while the
    channel is paused; it goes once Meta takes the channel's sends again."""

    send: ClaimedSend
    error: str


Outcome = Sent | Retry | Unknown | Rejected | Held


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
        values={
            "state": JobState.in_flight,
            "attempts": OutboxJob.attempts + 1,
            "locked_by": bindparam("claim_worker"),
            "locked_until": bindparam("claim_until"),
        },
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


def _hold(session: Session, held: list[Held], now: datetime) -> None:
    """Sends of a channel Meta refuses: ready again, their attempt not counted, and the channel
    paused with Meta's reason (the first time only: `paused_at` says since when)."""
    session.execute(
        update(OutboxJob)
        .where(OutboxJob.id.in_([o.send.job_id for o in held]), OutboxJob.state == JobState.in_flight)
        .values(
            state=JobState.ready,
            attempts=OutboxJob.attempts - 1,
            last_error=held[-1].error[:1000],
            locked_by=None,
            locked_until=None,
            run_at=now,
        )
    )
    channel_id = session.scalar(select(OutboxJob.channel_id).where(OutboxJob.id == held[0].send.job_id))
    if channel_id is not None:
        pause_channel(session, channel_id, reason=held[-1].error, at=now)


def resume_channel(session: Session, channel_id: int) -> None:
    channels.resume_channel(session, channel_id)


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


def record_outcomes(
    session: Session,
    outcomes: list[Outcome],
    *,
    grace_seconds: float,
    subscriptions: Subscriptions | None = None,
    prices: Prices | None = None,
    resumed_channel: int | None = None,
) -> int:
    """Store a round of send results and their events in one transaction; returns how many events.
    `prices`: what a category named by a parked status's `pricing` costs. `resumed_channel`: the
    paused channel these outcomes came from, when Meta answered its probe about the message (took it,
    or refused it for a reason of its own): the channel resumes."""
    now = utcnow()
    # A send that kept failing to reach Meta (refused, throttled) for its whole retry policy fails.
    outcomes = [
        Rejected(o.send, o.error)
        if isinstance(o, Retry) and SEND_NOT_DELIVERED.exhausted(o.send.attempts)
        else o
        for o in outcomes
    ]
    changes: list[StatusChange] = []
    sent = [o for o in outcomes if isinstance(o, Sent)]
    finished = [o.send.job_id for o in outcomes if isinstance(o, Sent | Rejected)]
    if sent and dialect_name(session) == "postgresql":
        # The wamids set, the finished rows deleted and the statuses parked for them read, in one
        # round trip (the writer waits on each: see docs/performance.md).
        rows = session.connection().execute(
            _sent_round(),
            {
                "messages": [o.send.message_id for o in sent],
                "wamids": [o.wamid for o in sent],
                "held": [o.upstream_status for o in sent],
                "jobs": finished,
            },
        )
        finished = []  # deleted by that statement
        parked = apply_parked_rows(session, rows.all(), prices=prices)
        changes += parked.changes
        settle_sends(session, parked.settled)
    elif sent:
        session.connection().execute(
            _SET_WAMID,
            [{"message": o.send.message_id, "wamid": o.wamid, "held": o.upstream_status} for o in sent],
        )
        parked = apply_parked_statuses(session, [o.wamid for o in sent], prices=prices)
        changes += parked.changes
        settle_sends(session, parked.settled)
    rejected = [o for o in outcomes if isinstance(o, Rejected)]
    if rejected:
        errors = {o.send.message_id: o.external_error for o in rejected}
        for message in session.scalars(select(Message).where(Message.id.in_(errors))):
            change = apply_status(message, MessageStatus.failed, external_error=errors[message.id])
            if change:
                changes.append(change)
    delete_jobs(session, finished)
    held = [o for o in outcomes if isinstance(o, Held)]
    if held:
        _hold(session, held, now)
    elif resumed_channel is not None:
        resume_channel(session, resumed_channel)
    retry = [
        {
            "job": o.send.job_id,
            "run_at": now + timedelta(seconds=SEND_NOT_DELIVERED.delay(o.send.attempts)),
            "error": o.error[:1000],
        }
        for o in outcomes
        if isinstance(o, Retry)
    ]
    if retry:
        session.connection().execute(_RETRY_LATER, retry)
    until = now + timedelta(seconds=grace_seconds)
    unknown = [
        {"job": o.send.job_id, "error": o.error[:1000], "until": until}
        for o in outcomes
        if isinstance(o, Unknown)
    ]
    if unknown:
        session.connection().execute(_AWAIT_WEBHOOK, unknown)
    # A batch is complete once none of its sends waits to be handed to Meta.
    handed = [
        o.send.message_id
        for o in outcomes
        if not isinstance(o, Retry | Held) and o.send.priority == Priority.bulk
    ]
    events = complete_batches(session, handed, subscriptions) if handed else 0
    return events + publish_status_changes(session, changes, subscriptions)


def park_outcome(session: Session, outcome: Outcome, error: str) -> None:
    """A send result that cannot be stored (see outbox/isolation.py): kept as a dead letter, and its
    row taken out of the outbox so the lane goes on. The message keeps the status it had."""
    detail: dict[str, Any]
    if isinstance(outcome, Sent):
        detail = {"wamid": outcome.wamid}
    elif isinstance(outcome, Rejected):
        detail = {"external_error": outcome.external_error}
    else:
        detail = {"error": outcome.error}
    bury(
        session,
        kind="send_outcome",
        reference=outcome.send.message_id,
        payload={"job_id": outcome.send.job_id, "outcome": type(outcome).__name__.lower(), **detail},
        error=error,
        attempts=outcome.send.attempts,
    )
    session.execute(delete(OutboxJob).where(OutboxJob.id == outcome.send.job_id))
    if outcome.send.priority == Priority.bulk:
        with contextlib.suppress(Exception), session.begin_nested():
            complete_batches(session, [outcome.send.message_id])


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
