"""Which dispatcher paces a channel: exactly one at a time, so Meta's per-number limit holds.

SQLite runs one dispatcher process by design, so it owns every channel. On PostgreSQL each channel is
a session-level advisory lock held on a connection of the worker's own: the server frees it the moment
that connection ends, so a crashed or stopped worker's channels pass to another at once, without a
lease to wait out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

import psycopg

from wagate.outbox.notify import libpq_url

log = logging.getLogger(__name__)

# The first half of the two-int advisory lock key: wagate's channel locks, apart from anyone else's.
LOCK_CLASS = 0x77A6


class ChannelOwnership(Protocol):
    async def acquire(self, channel_ids: Iterable[int]) -> set[int]:
        """Take what can be taken of `channel_ids`; returns every channel held now."""
        ...

    async def close(self) -> None: ...


class SingleProcessOwnership:
    def __init__(self) -> None:
        self.held: set[int] = set()

    async def acquire(self, channel_ids: Iterable[int]) -> set[int]:
        self.held |= set(channel_ids)
        return set(self.held)

    async def close(self) -> None:
        self.held.clear()


class AdvisoryLockOwnership:
    def __init__(self, database_url: str) -> None:
        self.url = libpq_url(database_url)
        self.conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self.held: set[int] = set()

    async def _connection(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        if self.conn is not None and not self.conn.closed:
            try:
                await self.conn.execute("SELECT 1")
                return self.conn
            except psycopg.Error:
                log.warning("lost the connection holding channel locks; taking them again")
        # A new connection holds no locks: whatever we held is free for others now.
        self.held.clear()
        self.conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        return self.conn

    async def acquire(self, channel_ids: Iterable[int]) -> set[int]:
        conn = await self._connection()
        for channel_id in sorted(set(channel_ids) - self.held):
            # Not re-asked for held channels: a session lock taken twice must be released twice.
            cursor = await conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, channel_id))
            row = await cursor.fetchone()
            if row is not None and row[0]:
                self.held.add(channel_id)
        return set(self.held)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()  # ends the session, which frees its advisory locks
        self.conn = None
        self.held.clear()


def ownership_for(database_url: str) -> ChannelOwnership:
    if database_url.startswith("sqlite"):
        return SingleProcessOwnership()
    return AdvisoryLockOwnership(database_url)
