"""The send job: claim a channel's due sends, call the Cloud API, record what happened. This module
records the outcomes; the claim is dispatch/send_claims.py, the release of sends whose outcome stays
unknown dispatch/unsettled.py, the calls dispatch/send_lane.py.

The claim is the attempt record: it marks the rows `in_flight` and commits before any HTTP call, so a
process killed mid-call leaves rows whose outcome is unknown rather than rows that look unsent. Meta's
status webhooks carry our message id in `biz_opaque_callback_data`, so whichever of them arrives settles
such a row (`settle_sends`); what the grace period does with one that stays unsettled is in
`release_unconfirmed`. Only a send that certainly did not reach Meta is retried at once.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, any_, bindparam, case, delete, func, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from wagate.bulk.completion import complete_batches
from wagate.channels import service as channels
from wagate.channels.service import pause_channel
from wagate.core.db import dialect_name, utcnow
from wagate.core.tables import table_of
from wagate.dispatch.unsettled import settle_sends
from wagate.events.subscriptions import Subscriptions
from wagate.messages.events import publish_status_changes
from wagate.messages.meta_statuses import apply_parked_rows, apply_parked_statuses, parked_statuses_for
from wagate.messages.models import Message, MessageStatus
from wagate.messages.pricing import Prices
from wagate.messages.status import StatusChange, apply_status
from wagate.outbox.dead_letters import bury
from wagate.outbox.models import ClaimedSend, JobState, OutboxJob, Priority, delete_jobs
from wagate.outbox.retry import SEND_NOT_DELIVERED

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
