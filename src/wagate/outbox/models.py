from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Enum,
    Index,
    Integer,
    Select,
    SmallInteger,
    String,
    Update,
    bindparam,
    delete,
    update,
)
from sqlalchemy.orm import Mapped, Session, mapped_column

from wagate.core.db import dialect_name, utcnow
from wagate.core.tables import Base, BigIntId, UTCDateTime


class JobKind(enum.StrEnum):
    send_message = "send_message"
    meta_webhook = "meta_webhook"
    sync_templates = "sync_templates"
    purge_expired = "purge_expired"
    # An event for an account webhook or a status_callback URL (see wagate.events).
    deliver_event = "deliver_event"
    # A status_callback's `after_seconds` report: due at acceptance + N, it becomes a delivery then.
    status_report = "status_report"


class JobState(enum.StrEnum):
    ready = "ready"
    # Claimed for an upstream call that is under way. Found past its lease, the process died during
    # the call and nothing recorded its outcome.
    in_flight = "in_flight"
    # The call's answer left it open whether Meta has the message (timeout after sending, 5xx).
    unconfirmed = "unconfirmed"


class Priority(enum.IntEnum):
    single = 0  # one message, usually an OTP: goes before any bulk row of its channel
    bulk = 1
    # Every kind but sends. So a channel's rows of a better priority are its sends: a lane's claim
    # finds them by `ix_outbox_due` alone (see `wagate.dispatch.sends`).
    background = 2


class OutboxJob(Base):
    """A unit of work for the dispatcher, written in the same transaction as the data it acts on."""

    __tablename__ = "outbox"
    __table_args__ = (
        # A channel's due sends in the order a claim takes them (migration 0015).
        Index("ix_outbox_due", "channel_id", "state", "priority", "id"),
        Index("ix_outbox_kind_due", "kind", "run_at"),
        Index("ix_outbox_ordering", "ordering_key", "id"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    kind: Mapped[JobKind] = mapped_column(Enum(JobKind, native_enum=False, length=32))
    state: Mapped[JobState] = mapped_column(
        Enum(JobState, native_enum=False, length=16), default=JobState.ready
    )
    priority: Mapped[int] = mapped_column(SmallInteger, default=Priority.single)
    # Sends are paced per channel; other kinds leave it empty.
    channel_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # An event delivery's account: the event lane shares its calls fairly between accounts.
    account_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    # A bulk send's batch: whether a batch still has sends waiting is one index lookup.
    batch_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    # Rows sharing a key run one at a time, oldest first: one message's events reach one endpoint
    # in the order they happened.
    ordering_key: Mapped[str | None] = mapped_column(String(80), nullable=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    run_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(String(1000), nullable=True)
    locked_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    locked_until: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # A send with a validity period (API.md section 11): not handed to Meta by then, it is never sent.
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


def outbox_row(
    kind: JobKind,
    *,
    payload: dict[str, Any],
    run_at: datetime,
    priority: int,
    now: datetime,
    channel_id: int | None = None,
    account_id: int | None = None,
    message_id: str | None = None,
    batch_id: str | None = None,
    ordering_key: str | None = None,
    claimed_by: FastClaim | None = None,
    expires_at: datetime | None = None,
) -> dict[str, Any]:
    """An outbox row as the values of a Core insert, every column given, so rows built for different
    kinds can go in one multi-row statement. `claimed_by`: stored already claimed, its attempt recorded
    (the fast path of a single send)."""
    return {
        "kind": kind,
        "state": JobState.in_flight if claimed_by else JobState.ready,
        "priority": priority,
        "channel_id": channel_id,
        "account_id": account_id,
        "message_id": message_id,
        "batch_id": batch_id,
        "ordering_key": ordering_key,
        "payload": payload,
        "run_at": run_at,
        "attempts": 1 if claimed_by else 0,
        "last_error": None,
        "locked_by": claimed_by.worker_id if claimed_by else None,
        "locked_until": claimed_by.locked_until if claimed_by else None,
        "created_at": now,
        "expires_at": expires_at,
    }


@dataclass(frozen=True)
class ClaimedSend:
    """A send row claimed for one upstream call (its attempt already recorded)."""

    job_id: int
    message_id: str
    body: dict[str, Any]
    attempts: int
    priority: int
    # Its validity period's end, and the period (for the error): see `expired_error`.
    expires_at: datetime | None = None
    validity_seconds: int | None = None
    request_id: str | None = None  # the request that accepted it (for the send's log line)

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and now >= self.expires_at


def expired_error(validity_seconds: int | None) -> str:
    """The `external_error` of a send not handed to Meta within its validity period."""
    return f"expired: not handed to WhatsApp within {validity_seconds} s of its acceptance"


@dataclass(frozen=True)
class FastClaim:
    """Room for a single send in its channel's lane right now (`SendRooms.prepare_claim`, in
    wagate.outbox.fast_claims).

    The API stores the send's row already claimed by `worker_id` until `locked_until`, and once that
    is committed calls `started`: the lane calls Meta at once, with no claim and no wake-up between.
    """

    worker_id: str
    locked_until: datetime
    started: Callable[[ClaimedSend], None]


def bound_claim() -> dict[str, Any]:
    """What a claim built once sets on each row it takes: one more attempt, and the worker and lease
    bound at execution (`claim_worker`, `claim_until`)."""
    return {
        "attempts": OutboxJob.attempts + 1,
        "locked_by": bindparam("claim_worker"),
        "locked_until": bindparam("claim_until"),
    }


def claim_statement(
    dialect: str, due: Select[Any], *, values: dict[str, Any], returning: Sequence[Any]
) -> Update:
    """The one statement that marks the outbox rows `due` selects as taken and returns `returning` of
    each. On PostgreSQL rows that another worker is claiming at this moment are skipped, not waited
    for. The hot claims (a lane's sends, Meta's stored webhooks) build theirs once with bound
    parameters: building and keying the expression anew cost a third of a worker's claims."""
    if dialect == "postgresql":
        due = due.with_for_update(skip_locked=True)
    return update(OutboxJob).where(OutboxJob.id.in_(due)).values(**values).returning(*returning)


def claim_rows(
    session: Session,
    due: Select[Any] | Callable[[str], Update],
    *,
    values: dict[str, Any] | None = None,
    returning: Sequence[Any] = (),
    params: dict[str, Any] | None = None,
) -> Sequence[Any]:
    """Claim with `claim_statement`: from a `due` select, or from a builder of the whole statement
    for the session's dialect (cached by the caller) and its `params`."""
    if isinstance(due, Select):
        statement = claim_statement(dialect_name(session), due, values=values or {}, returning=returning)
    else:
        statement = due(dialect_name(session))
    # On the connection, as a Core statement: the ORM's bulk-update path (synchronizing a session that
    # holds none of these rows) cost more than the rest of a claim, and a lane claims for every wake-up.
    return session.connection().execute(statement, params or {}).all()


_DELETE_JOBS = delete(OutboxJob).where(OutboxJob.id.in_(bindparam("job_ids", expanding=True)))


def delete_jobs(session: Session, job_ids: Sequence[int]) -> None:
    """Take finished rows out of the outbox. Built once and run on the connection: a worker finishes
    rows after every send and every batch of Meta's webhooks."""
    if job_ids:
        session.connection().execute(_DELETE_JOBS, {"job_ids": list(job_ids)})
