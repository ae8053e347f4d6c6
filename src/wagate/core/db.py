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
  the database's commit listeners once its batch committed, never for a unit rolled back.
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
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import orjson
from psycopg import _queries
from sqlalchemy import (
    JSON,
    BigInteger,
    Connection,
    DateTime,
    Engine,
    Insert,
    Integer,
    MetaData,
    Select,
    Table,
    bindparam,
    create_engine,
    event,
    func,
    insert,
    literal_column,
    select,
    true,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Session
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import TableValuedAlias
from sqlalchemy.types import TypeDecorator

log = logging.getLogger(__name__)
T = TypeVar("T")
# SQLite's writer does not checkpoint inside its commits; the WAL is copied back at most this often.
CHECKPOINT_SECONDS = 1.0
# PostgreSQL: deadlock_detected and serialization_failure; the transaction did nothing, run it again.
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
RETRY_ATTEMPTS = 3
# PostgreSQL's writer splits what waits into two batches above this many units (`_GroupCommitter`):
# at 64 connections batches of 32 accepted about 9 % more sends a second than one of every
# request in flight; 16 and 48 did worse (docs/decisions/0002-postgresql-writer.md). SQLite's writer
# spends its own CPU on a batch rather than waiting, so splitting only adds commits there.
POSTGRESQL_SPLIT_ABOVE = 32
UnitOfWork = Callable[[Session], T]
# A list in a write session's `info` of what its units leave for after the commit (wagate.core.live's
# `record_live` appends to it). `run_units` takes out a unit's own when it is rolled back, and the
# Database hands the rest of a committed batch to its commit listeners.
COMMIT_NOTES = "wagate.commit_notes"
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

# Constraint names fixed by convention so Alembic migrations are the same on SQLite and PostgreSQL.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def table_of(model: type[Base]) -> Table:
    """A model's table, for Core statements on hot paths (no ORM unit of work)."""
    return cast(Table, model.__table__)


def rows_from_json(table: Table, parameter: str) -> TableValuedAlias:
    """PostgreSQL: rows of `table` given as one JSON array of objects keyed by column (the parameter
    `parameter`; a missing key is NULL), as a table to insert from, numbered in their order
    (`ordinality`). One parameter, written by orjson and read by PostgreSQL, both in C: an array per
    column costs the driver a Python loop per value. And the statement's text is the same for any
    number of rows, so PostgreSQL parses and plans it once."""
    rows = func.json_populate_recordset(
        literal_column(f"NULL::{table.name}"), bindparam(parameter, type_=JSON)
    )
    return rows.table_valued(*(column.name for column in table.c), with_ordinality="ordinality")


def insert_from_json(table: Table, parameter: str) -> Insert:
    """PostgreSQL: insert the rows given as JSON in the parameter `parameter` (`rows_from_json`), in
    their order (so are the ids the database gives them); every column but the key is taken from the
    rows."""
    rows = rows_from_json(table, parameter)
    columns = [column.name for column in table.c if not column.primary_key]
    return insert(table).from_select(
        columns, select(*(rows.c[name] for name in columns)).order_by(rows.c.ordinality)
    )


def for_each_value(
    query: Select[*tuple[Any, ...]], column: ColumnElement[Any], parameter: str
) -> Select[*tuple[Any, ...]]:
    """PostgreSQL: `query`, which finds at most one row for one value of `column` (a unique index
    holds it), run for each value of the array parameter `parameter`: one index lookup per value.

    One parameter: the statement's text is the same for any number of values, so psycopg prepares it
    once. And a lookup per value, whatever the table's statistics say: once prepared, a statement
    runs on a generic plan, and for a table that grew since its statistics were taken (the customers
    learned from the statuses of a first campaign) the planner believes it holds a row or two. It
    then chose to read all of the account's rows and compare each one with every value: 9-14 ms for
    an `IN` list, up to 86 ms for a semi-join on the array, instead of about 1, for 136 user ids
    among 3,000 (docs/decisions/0003-status-webhooks.md)."""
    values = func.unnest(bindparam(parameter, type_=postgresql.ARRAY(column.type)))
    wanted = values.table_valued("value").render_derived()
    found = query.where(column == wanted.c.value).limit(1).lateral()
    return select(found).select_from(wanted).join(found, true())


def utcnow() -> datetime:
    return datetime.now(UTC)


# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
BigIntId = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python, whatever the database keeps."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


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


@dataclass
class _PendingUnit:
    unit: UnitOfWork[Any]
    future: asyncio.Future[Any]


def detached(session: Session, instance: T) -> T:
    """`instance` written and taken out of the session, so a unit can return it: the batch expires
    every object still in the session after each unit, and an expired object cannot be read once
    its session is closed."""
    session.flush()
    session.expunge(instance)
    return instance


def _run_alone(session: Session, unit: UnitOfWork[T]) -> T:
    """One unit, as if it had the session to itself: what it changed through the ORM is written
    before the next unit runs (Core statements do not autoflush), and what it loaded is not handed
    stale to the next one."""
    result = unit(session)
    session.flush()
    session.expire_all()
    return result


@dataclass(frozen=True)
class Mergeable(Generic[T]):
    """A unit of work that a batch runs together with the others of its key: `run_many(session,
    items)` stores all their items at once and returns one result for each, in order. Alone (a batch
    of one, or the retry of a batch that failed, a savepoint per unit) it runs with its item only."""

    key: Hashable
    item: Any
    run_many: Callable[[Session, list[Any]], list[T]]

    def __call__(self, session: Session) -> T:
        return self.run_many(session, [self.item])[0]


def _bound(run_many: Callable[[Session, list[Any]], list[T]], items: list[Any]) -> UnitOfWork[list[T]]:
    return lambda session: run_many(session, items)


def _run_merged(session: Session, units: list[UnitOfWork[Any]]) -> list[Any]:
    """Each unit's result; the `Mergeable` ones of one key and kind run as one, where the first of
    them stands in the batch."""
    groups: dict[tuple[Any, Hashable], list[int]] = {}
    for index, unit in enumerate(units):
        if isinstance(unit, Mergeable):
            groups.setdefault((unit.run_many, unit.key), []).append(index)
    results: list[Any] = [None] * len(units)
    for index, unit in enumerate(units):
        if not isinstance(unit, Mergeable):
            results[index] = _run_alone(session, unit)
            continue
        group = groups[(unit.run_many, unit.key)]
        if group[0] != index:
            continue  # ran with the first of its group
        items = [cast(Mergeable[Any], units[member]).item for member in group]
        merged = _run_alone(session, _bound(unit.run_many, items))
        for member, result in zip(group, merged, strict=True):
            results[member] = result
    return results


def run_units(session: Session, units: list[UnitOfWork[Any]]) -> list[tuple[bool, Any]]:
    """Run a batch of units in the session's transaction and commit once.

    Optimistic: units rarely fail (every check ran before), so they first run without savepoints,
    which cost a statement each, and the `Mergeable` ones merged. If one raises, the batch is rolled
    back and run again with each unit alone in its own savepoint, so only the failing one is lost.
    """
    try:
        results: list[tuple[bool, Any]] = [(True, result) for result in _run_merged(session, units)]
        session.commit()
        return results
    except Exception:
        session.rollback()
        session.info.pop(COMMIT_NOTES, None)
        if len(units) == 1:
            raise
    results = []
    for unit in units:
        notes: list[Any] | None = session.info.get(COMMIT_NOTES)
        kept = len(notes) if notes else 0
        try:
            with session.begin_nested():
                results.append((True, _run_alone(session, unit)))
        except Exception as exc:  # the unit's own failure: only its savepoint rolls back
            results.append((False, exc))
            if notes := session.info.get(COMMIT_NOTES):
                del notes[kept:]
    session.commit()
    return results


class WriterSession:
    """The session of one writer thread, kept from batch to batch on one connection.

    A batch of one unit (a single send at a low rate, the dispatcher's result of one call) used to
    open a Session, check a connection out of the pool, and give both back: a tenth of the writer's
    CPU for such a batch (docs/performance.md, "A message alone"). Kept, the session only begins and
    commits. It holds no objects between batches (`expunge_all`), and a batch whose
    connection broke (or whose rollback failed) leaves it for a new one at the next batch. Only its
    thread may use it.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session: Session | None = None

    def _open(self) -> Session:
        if self._session is None:
            self._session = Session(self.engine.connect(), expire_on_commit=False)
        return self._session

    def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            connection = session.bind
            try:
                session.close()
            finally:
                if isinstance(connection, Connection):
                    connection.close()

    def _after_failure(self, session: Session, exc: BaseException) -> None:
        """Keep the session for the next batch only when its connection is sound and not in a
        transaction (run_units rolled back what failed)."""
        broken = isinstance(exc, DBAPIError) and exc.connection_invalidated
        if not broken:
            try:
                session.rollback()
                session.info.clear()
                session.expunge_all()
                return
            except Exception:
                log.debug("the writer's session could not roll back; a new one follows", exc_info=True)
        self.close()

    def run(self, units: list[UnitOfWork[Any]], notes: list[Any] | None = None) -> list[tuple[bool, Any]]:
        """`run_units`, again when PostgreSQL rolled it all back to break a deadlock (with the large
        units' connection) or a serialization conflict: nothing was stored. `notes`: receives the
        committed units' notes (`COMMIT_NOTES`)."""
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            session = self._open()
            try:
                results = run_units(session, units)
            except DBAPIError as exc:
                self._after_failure(session, exc)
                if (
                    attempt == RETRY_ATTEMPTS
                    or getattr(exc.orig, "sqlstate", None) not in RETRYABLE_SQLSTATES
                ):
                    raise
                log.warning("a write was rolled back by the server (%s); running it again", exc.orig)
                continue
            except BaseException as exc:
                self._after_failure(session, exc)
                raise
            committed = session.info.pop(COMMIT_NOTES, None)
            if notes is not None and committed:
                notes += committed
            session.expunge_all()
            return results
        raise AssertionError("unreachable")


@dataclass
class _GroupCommitter:
    """Runs queued units of work in batches, one transaction and one commit per batch.

    Units submitted `first` (the dispatcher's claims and results) go into the next batch ahead of
    the others, so sending never queues behind a crowd of API writes.

    `split_above`: when more units than this wait, a batch takes half of them (at least this many),
    and the rest start the next batch as soon as it is done. The event loop then answers and reads
    one half's requests while the other half's batch waits on the database, instead of idling through
    one batch of every request in flight (docs/decisions/0002-postgresql-writer.md).
    """

    run_batch: Callable[[list[UnitOfWork[Any]]], Awaitable[list[tuple[bool, Any]]]]
    max_batch: int = 256
    split_above: int | None = None
    urgent: deque[_PendingUnit] = field(default_factory=deque)
    normal: deque[_PendingUnit] = field(default_factory=deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def submit(self, unit: UnitOfWork[T], *, first: bool) -> T:
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run(), name="wagate-group-commit")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        (self.urgent if first else self.normal).append(_PendingUnit(unit, future))
        self.ready.set()
        return await future

    def _take_batch(self) -> list[_PendingUnit]:
        batch: list[_PendingUnit] = []
        size = self.max_batch
        waiting = len(self.urgent) + len(self.normal)
        if self.split_above is not None and waiting > self.split_above:
            size = min(size, max(self.split_above, (waiting + 1) // 2))
        for queue in (self.urgent, self.normal):
            while queue and len(batch) < size:
                batch.append(queue.popleft())
        return batch

    async def _run(self) -> None:
        while True:
            await self.ready.wait()
            self.ready.clear()
            while batch := self._take_batch():
                try:
                    results = await self.run_batch([p.unit for p in batch])
                except Exception as exc:  # the commit itself failed: nothing of the batch is stored
                    results = [(False, exc)] * len(batch)
                for pending, (ok, value) in zip(batch, results, strict=True):
                    if pending.future.done():
                        continue
                    if ok:
                        pending.future.set_result(value)
                    else:
                        pending.future.set_exception(value)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()


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
        self._committer = _GroupCommitter(
            self._run_batch, split_above=None if self.is_sqlite else POSTGRESQL_SPLIT_ABOVE
        )
        self._large_thread: ThreadPoolExecutor | None = None
        self._large_committer: _GroupCommitter | None = None
        self._claim_thread: ThreadPoolExecutor | None = None
        self._claim_committer: _GroupCommitter | None = None
        if not self.is_sqlite:
            self._large_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wagate-db-large")
            self._large_committer = _GroupCommitter(self._run_large_unit, max_batch=1)
            self._claim_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wagate-db-claims")
            self._claim_committer = _GroupCommitter(self._run_claims)
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
