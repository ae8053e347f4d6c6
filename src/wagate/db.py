"""Database access: one engine, read sessions, and a write path that commits units of work.

Every write of the API and the dispatcher is a *unit of work*: an async function that takes a session,
adds and flushes, and returns a value. `Database.write(unit)` runs it in a transaction and commits. On
SQLite there is only ever one writer, and a durable commit costs an fsync; so units that arrive while a
commit is in flight are queued and run together, each in its own savepoint, under one commit (group
commit). A unit that raises rolls back only its savepoint and gets its exception back; the others commit.
On PostgreSQL each unit has its own transaction, since the server runs them side by side.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import DateTime, MetaData, event
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeDecorator

T = TypeVar("T")
UnitOfWork = Callable[[AsyncSession], Awaitable[T]]

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


def utcnow() -> datetime:
    return datetime.now(UTC)


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


def dialect_name(session: AsyncSession) -> str:
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


def _configure_sqlite(engine: AsyncEngine, *, begin: str) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, issue BEGIN, so that SAVEPOINTs work (SQLAlchemy's
        # documented recipe for pysqlite/aiosqlite).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")  # durable: a 201 means the message is on disk
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql(begin)


@dataclass
class _PendingUnit:
    unit: UnitOfWork[Any]
    future: asyncio.Future[Any]


@dataclass
class _GroupCommitter:
    """Runs queued units of work in batches, one SQLite transaction per batch.

    Units submitted `first` (the dispatcher's claims and results) go into the next batch ahead of
    the others, so sending never queues behind a crowd of API writes.
    """

    sessionmaker: async_sessionmaker[AsyncSession]
    max_batch: int = 256
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
        for queue in (self.urgent, self.normal):
            while queue and len(batch) < self.max_batch:
                batch.append(queue.popleft())
        return batch

    async def _run(self) -> None:
        while True:
            await self.ready.wait()
            self.ready.clear()
            while batch := self._take_batch():
                await self._commit_batch(batch)

    async def _commit_batch(self, batch: list[_PendingUnit]) -> None:
        results: list[tuple[_PendingUnit, bool, Any]] = []
        try:
            async with self.sessionmaker() as session:
                for pending in batch:
                    if pending.future.cancelled():
                        continue
                    try:
                        async with session.begin_nested():
                            value = await pending.unit(session)
                        results.append((pending, True, value))
                    except Exception as exc:  # the unit's own failure: only its savepoint rolls back
                        results.append((pending, False, exc))
                await session.commit()
        except Exception as exc:  # the commit itself failed: nothing of the batch is stored
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(exc)
            return
        for pending, ok, value in results:
            if pending.future.done():
                continue
            if ok:
                pending.future.set_result(value)
            else:
                pending.future.set_exception(value)


class Database:
    def __init__(self, url: str, *, pool_size: int = 20) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            path = sqlite_path(url)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            self.engine = create_async_engine(url, pool_size=pool_size, max_overflow=0)
            _configure_sqlite(self.engine, begin="BEGIN")
            # The one writer connection. IMMEDIATE takes the write lock up front, so a second process
            # (a CLI command beside `serve`) waits its turn instead of failing on a lock upgrade.
            self.write_engine = create_async_engine(url, pool_size=1, max_overflow=0)
            _configure_sqlite(self.write_engine, begin="BEGIN IMMEDIATE")
        else:
            # No pre-ping: it costs a round trip per checkout; a dead connection fails its statement
            # and the pool replaces it.
            self.engine = create_async_engine(url, pool_size=pool_size, max_overflow=pool_size)
            self.write_engine = self.engine
        self.sessionmaker = async_sessionmaker(self.engine, expire_on_commit=False)
        self.write_sessionmaker = async_sessionmaker(self.write_engine, expire_on_commit=False)
        self._committer = _GroupCommitter(self.write_sessionmaker) if self.is_sqlite else None
        # Called after every successful write commit (the dispatcher's wake-up, in this process).
        self.after_commit: list[Callable[[], None]] = []

    @asynccontextmanager
    async def read(self) -> Any:
        async with self.sessionmaker() as session:
            yield session

    async def write(self, unit: UnitOfWork[T], *, first: bool = False) -> T:
        """Run `unit` in a transaction and commit it; the commit is durable when this returns.

        `first`: on SQLite, put it ahead of units already waiting (for the dispatcher's own writes).
        """
        if self._committer is not None:
            result = await self._committer.submit(unit, first=first)
        else:
            async with self.write_sessionmaker() as session, session.begin():
                result = await unit(session)
        for hook in self.after_commit:
            hook()
        return result

    async def dispose(self) -> None:
        if self._committer is not None and self._committer.task is not None:
            self._committer.task.cancel()
        await self.engine.dispose()
        if self.write_engine is not self.engine:
            await self.write_engine.dispose()
