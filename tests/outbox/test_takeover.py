"""A channel that passes from one process to another keeps to its rate across the handover.

The scale-out test (tests/dispatch/test_scale_out.py) found it: the new owner's limiter starts empty,
so right after a takeover it could send a second's worth while the previous owner's last second of
sends still counted at Meta. Now the ownership tells the dispatcher when a channel it took may have
been sent for by another process until moments ago, and its lane waits out one window first.

Here, on a virtual clock: the limiter's hold, and what a handover does without it. On PostgreSQL: when
`taken_over` says so (the channel was refused before, or has sends another process claimed with a
running lease) and when it does not (a channel nobody sent for), and that a process whose locks'
connection is gone holds no channel, so its lanes stop instead of sending beside the next owner.
"""

from __future__ import annotations

import asyncio
import os
import random
from datetime import timedelta

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session
from test_limiter import most_in_window, run_until

from wagate.core.db import utcnow
from wagate.core.migrate import migrate
from wagate.outbox.limiter import SlidingWindowLimiter
from wagate.outbox.models import JobKind, JobState, OutboxJob, Priority
from wagate.outbox.ownership import LOCK_CLASS, AdvisoryLockOwnership

RATE = 80


@pytest.mark.parametrize("held", [False, True], ids=["no-hold", "hold"])
def test_a_handover_keeps_to_the_rate_only_with_the_hold(held: bool) -> None:
    """A busy owner sends for 3 s and is gone; the next takes the channel at once and is as busy."""
    before = run_until(SlidingWindowLimiter(RATE), 0.0, 3.0)
    successor = SlidingWindowLimiter(RATE)
    if held:
        successor.hold_window(3.0)
    after = run_until(successor, 3.0, 6.0)
    most = most_in_window(before + after)
    if held:
        assert most <= RATE
        assert min(after) >= 4.0 + SlidingWindowLimiter.TAKEOVER_SLACK
        # From then on at the rate again (the bucket filled meanwhile, as far as its burst).
        assert len([t for t in after if t < 5.1]) >= 0.95 * RATE
    else:
        assert most > RATE  # the defect: the previous owner's last second and a fresh burst


def test_the_hold_stops_single_sends_too_and_says_how_long() -> None:
    limiter = SlidingWindowLimiter(RATE)
    limiter.hold_window(10.0)
    assert limiter.available(10.5, single=True) == 0
    held_until = 10.0 + 1.0 + SlidingWindowLimiter.TAKEOVER_SLACK
    assert limiter.wait_time(10.5, single=True) == pytest.approx(held_until - 10.5, abs=1e-3)
    assert limiter.available(held_until, single=True) == RATE


# --- the ownership, on PostgreSQL ------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres(database_url: str) -> str:
    if database_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only: on SQLite one process owns every channel")
    migrate(database_url)
    return database_url


def channel() -> int:
    return random.randrange(10**6, 10**9)


def claimed_send(database_url: str, channel_id: int, *, lease_left: float) -> None:
    """A send row claimed by a process that is gone, its lease running out in `lease_left` seconds."""
    engine = create_engine(database_url)
    try:
        with Session(engine) as session, session.begin():
            now = utcnow()
            session.add(
                OutboxJob(
                    kind=JobKind.send_message,
                    state=JobState.in_flight,
                    priority=Priority.bulk,
                    channel_id=channel_id,
                    payload={},
                    run_at=now,
                    attempts=1,
                    locked_by="crashed-host:999999",
                    locked_until=now + timedelta(seconds=lease_left),
                    created_at=now,
                )
            )
    finally:
        engine.dispose()


def lock_holder(database_url: str, channel_id: int) -> str | None:
    """The `application_name` of the session holding the channel's lock."""
    url = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s",
            (LOCK_CLASS, channel_id),
        ).fetchone()
    return None if row is None else str(row[0])


async def eventually(ownership: AdvisoryLockOwnership, channel_id: int) -> set[int]:
    """`acquire` until it takes the channel (a dead session's locks go when the server has ended it)."""
    for _ in range(100):
        if held := await ownership.acquire({channel_id}):
            return held
        await asyncio.sleep(0.05)
    return set()


def test_a_channel_held_elsewhere_before_is_taken_over(postgres: str) -> None:
    one = channel()

    async def scenario() -> None:
        first, second = AdvisoryLockOwnership(postgres), AdvisoryLockOwnership(postgres)
        try:
            assert await first.acquire({one}) == {one}
            assert not first.taken_over(one)  # nobody sent for it before
            assert lock_holder(postgres, one) == f"wagate-locks {os.getpid()}@{os.uname().nodename}"[:63]
            assert await second.acquire({one}) == set()  # refused: the first holds it
            await first.close()  # it stops (or dies: its session ends either way)
            assert await eventually(second, one) == {one}
            assert second.taken_over(one)
            assert not second.taken_over(one)  # told once
        finally:
            await first.close()
            await second.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("lease_left", [5.0, -1.0], ids=["lease-running", "lease-over"])
def test_a_fresh_process_sees_a_dead_owners_claimed_sends(postgres: str, lease_left: float) -> None:
    """A new worker that never asked for the channel takes it from one SIGKILLed moments ago: the
    sends that one had claimed, their lease still running, are the sign. Once the lease ran out,
    the owner has been gone for longer than a window."""
    one = channel()
    claimed_send(postgres, one, lease_left=lease_left)

    async def scenario() -> bool:
        fresh = AdvisoryLockOwnership(postgres)
        try:
            assert await fresh.acquire({one}) == {one}
            return fresh.taken_over(one)
        finally:
            await fresh.close()

    assert asyncio.run(scenario()) is (lease_left > 0)


def test_without_the_locks_connection_a_process_holds_no_channel(postgres: str) -> None:
    """The connection holding the locks is cut (here: terminated by the server) and cannot be made
    again: `acquire` answers that nothing is held, so the dispatcher stops the lanes, instead of
    raising and leaving them to send beside whichever process takes the channels now."""
    one = channel()

    async def scenario() -> None:
        owner = AdvisoryLockOwnership(postgres)
        try:
            assert await owner.acquire({one}) == {one}
            assert owner.conn is not None
            backend = owner.conn.info.backend_pid
            admin = postgres.replace("postgresql+psycopg://", "postgresql://")
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (backend,))
            owner.url = "postgresql://postgres@127.0.0.1:1/nowhere"  # the server out of reach
            assert await owner.acquire({one}) == set()
            assert lock_holder(postgres, one) is None  # free for the next owner
        finally:
            await owner.close()

    asyncio.run(scenario())
