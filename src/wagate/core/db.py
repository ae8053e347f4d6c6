"""Database access: async read sessions, and a write path that commits units of work.

Every write of the API and the dispatcher is a *unit of work*: a plain function that takes a (sync)
session, adds and flushes, and returns a value. `Database.write(unit)` runs it in a transaction and
commits. Units are synchronous so that the database decides how to run them cheaply:
- Units that arrive while a commit is in flight are queued, and the next batch runs them together
  under one commit (group commit): a durable commit costs an fsync (SQLite) or a WAL flush
  (PostgreSQL), and one statement's round trip is most of a small unit's cost.
- A batch runs on the writer thread with the blocking driver (pysqlite, psycopg): one hand-off to
  that thread per batch, not one per statement.
- A unit that raises gets its exception back and stores nothing; the others commit.
- Units of one kind that would each run the same few statements for one row (single sends) can be
  `Mergeable`: a batch runs those of one key together, one statement per table for all of them.
- What a unit leaves for after its commit (`COMMIT_NOTES`: the live changes of wagate.core.live) goes to
  the database's commit listeners once its batch committed, never for a unit rolled back; what it
  leaves to run before the commit (`COMMIT_STATEMENTS`: the NOTIFY of wagate.outbox.notify) runs in
  the transaction, in one round trip for the batch.
- On PostgreSQL a *large* unit (a bulk batch of up to 1000 messages, about 0.2 s; a batch of Meta's
  stored webhooks being applied, up to 500 bodies) commits on a second connection and thread of its
  own, so the small ones (single sends, the receiver's stores, the dispatcher's claims and results)
  do not wait behind it. Should the two deadlock, the server rolls one back and it is run
  again (`WriterSession.run`). On SQLite there is one writer, so a large unit queues like any other.
- Likewise on PostgreSQL a *claim* (the dispatcher taking due rows with `FOR UPDATE SKIP LOCKED`,
  which waits on no row lock and writes nothing the batches write) commits on a third connection of
  its own: a send's claim then never waits behind a batch of Meta's statuses being applied (a
  worker's writer is busy with those most of the time under load; behind them, a channel's claims
  came late and it fell short of its rate after taking over a dead worker's channels).

How a batch of units runs is wagate.core.units; the queue that groups them, wagate.core.group_commit;
the models' Base and column types, wagate.core.tables.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import orjson
from psycopg import _queries
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session

from wagate.core.group_commit import GroupCommitter
from wagate.core.units import UnitOfWork, WriterSession

log = logging.getLogger(__name__)
T = TypeVar("T")
# SQLite's writer does not checkpoint inside its commits; the WAL is copied back at most this often.
CHECKPOINT_SECONDS = 1.0
# PostgreSQL's writer splits what waits into two batches above this many units (`GroupCommitter`):
# at 64 connections batches of 32 accepted about 9 % more sends a second than one of every
# request in flight; 16 and 48 did worse (docs/decisions/0002-postgresql-writer.md). SQLite's writer
# spends its own CPU on a batch rather than waiting, so splitting only adds commits there.
POSTGRESQL_SPLIT_ABOVE = 32
CommitListener = Callable[[list[Any]], None]


def _cache_long_statements() -> None:
    """Let psycopg cache the conversion of long statements too.

    psycopg turns a query's `%(name)s` placeholders into PostgreSQL's `$n` by parsing its text, and
    remembers the result (the last 128 queries) only for queries under 4,096 characters and 50
    parameters. The multi-row statements of a group-commit batch (64 sends: over 700 parameters) were
    parsed anew every time: about a tenth of an accepted send's CPU on PostgreSQL (docs/performance.md,
    "Where the time goes now"). Batches of the same size repeat the same text, so the cache serves
    them; these bounds keep the largest (a batch of 256) in it. psycopg has no public setting for
    this: `tests/test_db_writes.py` fails if these names go away in a new release."""
    _queries.MAX_CACHED_STATEMENT_LENGTH = max(_queries.MAX_CACHED_STATEMENT_LENGTH, 128 * 1024)
    _queries.MAX_CACHED_STATEMENT_PARAMS = max(_queries.MAX_CACHED_STATEMENT_PARAMS, 8 * 1024)


_cache_long_statements()


def _timestamp_as_orjson_writes_it(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _dump_json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        # What orjson refuses (an integer beyond 64 bits, nesting deeper than 254 levels: a body of
        # Meta's stored among the rows of `rows_from_json`) the standard library writes.
        return json.dumps(value, default=_timestamp_as_orjson_writes_it)


# Options of every engine:
# - JSON columns (status history, outbox payloads, event bodies) are written on every send and status
#   change: orjson does it several times faster than the standard library.
# - A failed statement's exception does not repeat its parameters (OTP codes, phone numbers, texts,
#   encrypted secrets), so neither does a log line or a traceback that shows it.
ENGINE_OPTIONS: dict[str, Any] = {
    "json_serializer": _dump_json,
    "json_deserializer": orjson.loads,
    "hide_parameters": True,
}


def utcnow() -> datetime:
    return datetime.now(UTC)


def dialect_name(session: AsyncSession | Session) -> str:
    bind = session.bind
    assert bind is not None, "sessions are always bound to the engine"
    return bind.dialect.name


def isoformat(value: datetime | None) -> str | None:
    """API.md: times are ISO 8601 in UTC with a `Z`."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite"):
        return None
    path = url.split(":///", 1)[1] if ":///" in url else ""
    return Path(path) if path and path != ":memory:" else None


def create_sqlite_file(url: str) -> None:
    """Create the SQLite database file of `url`, with its directory, when it does not exist yet:
    readable and writable by its owner only (0600), not as a lax umask would make it. SQLite gives the
    database's mode to the -wal, -shm and journal files it makes beside it. An in-memory database has
    no file."""
    parsed = make_url(url)
    path = parsed.database
    if not path or path == ":memory:" or path.startswith("file:") or parsed.query.get("uri") == "true":
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with suppress(FileExistsError):  # SQLite opens what is there (another process may have made it)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _configure_sqlite(engine: AsyncEngine | Engine, *, begin: str, autocheckpoint: bool = True) -> None:
    sync_engine = engine.sync_engine if isinstance(engine, AsyncEngine) else engine

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, issue BEGIN, so that SAVEPOINTs work (SQLAlchemy's
        # documented recipe for pysqlite/aiosqlite).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")  # durable: a 201 means the message is on disk
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=10000")
        if not autocheckpoint:
            # The writer never copies the WAL back into the database inside a commit (a stall of
            # tens of milliseconds for whoever waits on that commit); `checkpoint()` does it beside.
            cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql(begin)


class Database:
    def __init__(self, url: str, *, pool_size: int = 20) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            create_sqlite_file(url)
            self.engine = create_async_engine(url, pool_size=pool_size, max_overflow=0, **ENGINE_OPTIONS)
            _configure_sqlite(self.engine, begin="BEGIN")
            # IMMEDIATE takes the write lock up front, so a second process (a CLI command beside
            # `serve`) waits its turn instead of failing on a lock upgrade.
            self.write_engine = create_engine(
                url.replace("sqlite+aiosqlite:", "sqlite:", 1), pool_size=1, max_overflow=0, **ENGINE_OPTIONS
            )
            _configure_sqlite(self.write_engine, begin="BEGIN IMMEDIATE", autocheckpoint=False)
        else:
            # No pre-ping: it costs a round trip per checkout; a dead connection fails its statement
            # and the pool replaces it.
            self.engine = create_async_engine(
                url, pool_size=pool_size, max_overflow=pool_size, **ENGINE_OPTIONS
            )
            # psycopg serves the same URL in blocking mode: one connection for the writer, one for
            # large units, one for claims.
            self.write_engine = create_engine(url, pool_size=3, max_overflow=0, **ENGINE_OPTIONS)
        # Batches run one at a time on this thread with the blocking driver: a batch is one hand-off
        # from the event loop, not one per statement, and a statement costs a round trip, not also a
        # trip through the event loop. (SQLite connections belong to the thread that made them.)
        self._writer_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wagate-db-writer")
        self.sessionmaker = async_sessionmaker(self.engine, expire_on_commit=False)
        self._committer = GroupCommitter(
            self._run_batch, split_above=None if self.is_sqlite else POSTGRESQL_SPLIT_ABOVE
        )
        self._large_thread: ThreadPoolExecutor | None = None
        self._large_committer: GroupCommitter | None = None
        self._claim_thread: ThreadPoolExecutor | None = None
        self._claim_committer: GroupCommitter | None = None
        if not self.is_sqlite:
            self._large_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wagate-db-large")
            self._large_committer = GroupCommitter(self._run_large_unit, max_batch=1)
            self._claim_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wagate-db-claims")
            self._claim_committer = GroupCommitter(self._run_claims)
        # Each writer thread's session (see WriterSession), used on that thread only.
        self._writer_session = WriterSession(self.write_engine)
        self._large_session = WriterSession(self.write_engine)
        self._claim_session = WriterSession(self.write_engine)
        self._last_checkpoint = time.monotonic()
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._commit_listeners: list[CommitListener] = []

    def add_commit_listener(self, listener: CommitListener) -> None:
        """`listener(notes)` runs on the event loop after each commit whose units left notes
        (`COMMIT_NOTES`), before their callers get their results; it must not block."""
        self._commit_listeners.append(listener)

    def _committed(self, notes: list[Any]) -> None:
        for listener in self._commit_listeners:
            try:
                listener(notes)
            except Exception:  # the batch is committed whatever a listener makes of it
                log.exception("a commit listener failed")

    async def _run_batch(self, units: list[UnitOfWork[Any]]) -> list[tuple[bool, Any]]:
        notes: list[Any] = []
        results = await asyncio.get_running_loop().run_in_executor(
            self._writer_thread, lambda: self._writer_session.run(units, notes)
        )
        if notes:
            self._committed(notes)
        if self.is_sqlite and time.monotonic() - self._last_checkpoint >= CHECKPOINT_SECONDS:
            self._last_checkpoint = time.monotonic()
            self._checkpoint_task = asyncio.create_task(self.checkpoint())
        return results

    async def _run_large_unit(self, units: list[UnitOfWork[Any]]) -> list[tuple[bool, Any]]:
        assert self._large_thread is not None
        notes: list[Any] = []
        results = await asyncio.get_running_loop().run_in_executor(
            self._large_thread, lambda: self._large_session.run(units, notes)
        )
        if notes:
            self._committed(notes)
        return results

    async def _run_claims(self, units: list[UnitOfWork[Any]]) -> list[tuple[bool, Any]]:
        assert self._claim_thread is not None
        return await asyncio.get_running_loop().run_in_executor(
            self._claim_thread, lambda: self._claim_session.run(units)
        )

    async def checkpoint(self) -> None:
        """SQLite: copy the WAL into the database file without holding up the writer (PASSIVE)."""
        if self.is_sqlite:
            try:
                async with self.engine.connect() as connection:
                    await connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            except Exception as exc:  # the next one catches up; the WAL only grows meanwhile
                log.warning("WAL checkpoint failed: %r", exc)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        async with self.sessionmaker() as session:
            yield session

    async def write(
        self, unit: UnitOfWork[T], *, first: bool = False, large: bool = False, claim: bool = False
    ) -> T:
        """Run `unit` in a transaction and commit it; the commit is durable when this returns.

        Units that come in while a commit is in flight share the next one (group commit); `first`
        puts a unit ahead of those already waiting (for the dispatcher's own writes); `large` and
        `claim` run it beside them on PostgreSQL (see the module's docstring). A `claim` unit takes
        rows with `FOR UPDATE SKIP LOCKED` and changes only those: it must never wait on a lock that
        a batch holds, or the two could deadlock.
        """
        if inspect.iscoroutinefunction(unit):
            raise TypeError("a unit of work is a plain function of a Session, not a coroutine function")
        if large and self._large_committer is not None:
            return await self._large_committer.submit(unit, first=first)
        if claim and self._claim_committer is not None:
            return await self._claim_committer.submit(unit, first=first)
        return await self._committer.submit(unit, first=first)

    async def dispose(self) -> None:
        self._committer.close()
        # Each thread closes its own session, after the batch it may be running.
        if self._large_committer is not None and self._large_thread is not None:
            self._large_committer.close()
            self._large_thread.submit(self._large_session.close)
            self._large_thread.shutdown(wait=True)
        if self._claim_committer is not None and self._claim_thread is not None:
            self._claim_committer.close()
            self._claim_thread.submit(self._claim_session.close)
            self._claim_thread.shutdown(wait=True)
        if self._checkpoint_task is not None:
            await asyncio.gather(self._checkpoint_task, return_exceptions=True)
        self._writer_thread.submit(self._writer_session.close)
        self._writer_thread.shutdown(wait=True)
        await self.engine.dispose()
        self.write_engine.dispose()
