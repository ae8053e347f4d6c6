"""The write path on PostgreSQL: a large unit (a bulk batch) commits beside the group-commit writer,
and a write the server rolls back to break a deadlock is run again."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from collections.abc import Callable

import psycopg
import pytest
from sqlalchemy import column, text
from sqlalchemy import insert as sql_insert
from sqlalchemy import table as sql_table
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from wagate.core.db import Database
from wagate.outbox.notify import CHANNEL, notify_outbox

# Its writes race a second session by fractions of a second (a deadlock, a small write beside a large
# one), which a loaded machine or a busy database server stretches: solo (beside the alone tier's
# tests, the deadlock test's unit was once rolled back twice, run three times).
pytestmark = pytest.mark.solo


@pytest.fixture
def table(database_url: str) -> str:
    if database_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only: SQLite has one writer, and a large unit queues like any other")
    with psycopg.connect(
        database_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
    ) as conn:
        conn.execute("DROP TABLE IF EXISTS counters")
        conn.execute("CREATE TABLE counters (id int PRIMARY KEY, value int NOT NULL)")
        conn.execute("INSERT INTO counters VALUES (1, 0), (2, 0)")
    return database_url


def values(url: str) -> dict[int, int]:
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        return {row[0]: row[1] for row in conn.execute("SELECT id, value FROM counters")}


def test_a_small_write_does_not_wait_for_a_large_one(table: str) -> None:
    async def scenario() -> tuple[float, float]:
        db = Database(table, pool_size=2)
        began = time.monotonic()

        def large(session: Session) -> float:
            session.execute(text("UPDATE counters SET value = value + 1 WHERE id = 1"))
            session.execute(text("SELECT pg_sleep(0.8)"))  # a batch of 1000 being stored, slowly
            return time.monotonic() - began

        def small(session: Session) -> float:
            session.execute(text("UPDATE counters SET value = value + 1 WHERE id = 2"))
            return time.monotonic() - began

        try:
            large_task = asyncio.create_task(db.write(large, large=True))
            await asyncio.sleep(0.1)
            small_done = await db.write(small)
            return small_done, await large_task
        finally:
            await db.dispose()

    small_done, large_done = asyncio.run(scenario())
    assert large_done >= 0.8
    assert small_done < 0.5, f"the small write took {small_done:.2f} s, behind the large one"
    assert values(table) == {1: 1, 2: 1}


def test_a_write_rolled_back_to_break_a_deadlock_is_run_again(table: str) -> None:
    """Our unit locks row 1 and then waits for row 2, which another session holds while it waits for
    row 1. Our unit waits first, so after deadlock_timeout (1 s) the server rolls it back; it runs
    again once the other has committed, and both increments are there."""
    other_has_row_2, ours_has_row_1 = threading.Event(), threading.Event()
    runs: list[float] = []

    def other_session() -> None:
        with psycopg.connect(table.replace("postgresql+psycopg://", "postgresql://")) as conn:
            conn.execute("UPDATE counters SET value = value + 10 WHERE id = 2")
            other_has_row_2.set()
            ours_has_row_1.wait(10)
            time.sleep(0.3)  # our unit is waiting for row 2 by now: it waits first
            conn.execute("UPDATE counters SET value = value + 10 WHERE id = 1")
            conn.commit()

    def unit(session: Session) -> None:
        runs.append(time.monotonic())
        session.execute(text("UPDATE counters SET value = value + 1 WHERE id = 1"))
        ours_has_row_1.set()
        other_has_row_2.wait(10)
        session.execute(text("UPDATE counters SET value = value + 1 WHERE id = 2"))

    async def scenario() -> None:
        db = Database(table, pool_size=2)
        try:
            await db.write(unit, large=True)
        finally:
            await db.dispose()

    other = threading.Thread(target=other_session)
    other.start()
    asyncio.run(scenario())
    other.join(10)
    assert len(runs) == 2, runs
    assert values(table) == {1: 11, 2: 11}


def test_units_wake_workers_of_other_processes_when_their_rows_commit(table: str) -> None:
    """`notify_outbox` (the API's sends and Meta's webhooks for a worker elsewhere): what the units of
    a committed batch noted reaches a LISTENing worker (sent once, before the commit), and nothing of
    a unit that failed."""

    def sends(channel_id: int) -> Callable[[Session], None]:
        def unit(session: Session) -> None:
            session.execute(text("UPDATE counters SET value = value + 1 WHERE id = 1"))
            notify_outbox(session, channel_id)

        return unit

    def webhook_then_fail(session: Session) -> None:
        notify_outbox(session, 9, webhook=True)
        raise RuntimeError("the unit fails: nothing of it commits")

    async def scenario() -> None:
        db = Database(table, pool_size=2)
        try:
            # Three units share one commit: two name channel 7, one channel 8.
            await asyncio.gather(db.write(sends(7)), db.write(sends(7)), db.write(sends(8)))
            with pytest.raises(RuntimeError):
                await db.write(webhook_then_fail)
        finally:
            await db.dispose()

    url = table.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        asyncio.run(scenario())
        heard = [note.payload for note in listener.notifies(timeout=1.0)]
    own = f"{os.getpid()}:"
    assert set(heard) == {own + "7", own + "8"}, heard
    assert values(table)[1] == 3


def test_a_long_multi_row_statement_is_converted_once_not_per_batch(table: str) -> None:
    """psycopg parses a query's placeholders anew unless it is in its cache, which by default takes no
    query over 4,096 characters or 50 parameters: a group-commit batch's multi-row statements were
    parsed on every batch (wagate.core.db `_cache_long_statements`). Private to psycopg, so checked here:
    an upgrade that renames these fails this test instead of silently costing the CPU again."""
    from psycopg import _queries

    db = Database(table, pool_size=1)
    count = 256  # 512 parameters, about 6 KB of SQL
    counters = sql_table("counters", column("id"), column("value"))

    def insert(first_id: int) -> Callable[[Session], None]:
        # A multi-row INSERT, as SQLAlchemy writes a batch's rows: the same text for the same count.
        statement = sql_insert(counters).values([{"id": first_id + n, "value": n} for n in range(count)])

        def unit(session: Session) -> None:
            session.execute(statement)

        return unit

    async def scenario() -> None:
        await db.write(insert(1000))  # the first batch of this size: parsed, and kept
        before = _queries._query2pg.cache_info()
        await db.write(insert(2000))  # the next: the same text, other values
        after = _queries._query2pg.cache_info()
        assert (after.hits - before.hits, after.misses - before.misses) == (1, 0)

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(db.dispose())


def test_the_writer_takes_a_new_connection_when_the_server_dropped_its_own(table: str) -> None:
    """The writer keeps its connection from batch to batch (units.WriterSession). When the server ends
    it (a restart, an administrator), the write that finds it gone fails and stores nothing, and the
    next write goes through on a new connection."""

    def add(amount: int) -> Callable[[Session], int]:
        def unit(session: Session) -> int:
            session.execute(
                text("UPDATE counters SET value = value + :amount WHERE id = 1"), {"amount": amount}
            )
            return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())

        return unit

    async def scenario() -> tuple[int, int]:
        db = Database(table, pool_size=2)
        try:
            first = await db.write(add(1))
            with psycopg.connect(
                table.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
            ) as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (first,))
            with pytest.raises(DBAPIError):
                await db.write(add(10))
            return first, await db.write(add(100))
        finally:
            await db.dispose()

    first, last = asyncio.run(scenario())
    assert last != first  # a new server process: a new connection
    assert values(table) == {1: 101, 2: 0}


def test_many_writes_in_flight_commit_in_two_halves(table: str) -> None:
    """64 writes waiting at once go in two transactions of 32, committed one after the other and in
    the order they came: the event loop serves one half's requests while the other half commits."""

    async def scenario() -> list[int]:
        db = Database(table, pool_size=2)

        def unit(session: Session) -> int:
            session.execute(text("UPDATE counters SET value = value + 1 WHERE id = 1"))
            return int(session.execute(text("SELECT txid_current()")).scalar_one())

        try:
            return await asyncio.gather(*(db.write(unit) for _ in range(64)))
        finally:
            await db.dispose()

    transactions = asyncio.run(scenario())
    assert transactions == sorted(transactions)
    assert sorted(Counter(transactions).values()) == [32, 32]
    assert values(table)[1] == 64
