"""Which dispatcher paces a channel: exactly one at a time, so Meta's per-number limit holds.

SQLite runs one dispatcher process by design, so it owns every channel. On PostgreSQL each channel is
a session-level advisory lock held on a connection of the worker's own: the server frees it the moment
that connection ends, so a crashed or stopped worker's channels pass to another at once, without a
lease to wait out. That connection is named `wagate-locks <pid>@<host>` (`application_name`), so
`pg_locks` joined with `pg_stat_activity` shows which process sends for which channel.

A channel that passes from one process to another carries no memory of its last second of sends:
the new owner's limiter is empty, and sending at once it could give Meta up to twice the channel's
rate in one second (the scale-out test saw it). So `taken_over` tells the dispatcher which channels
another process may have sent for until moments ago, and their lanes wait out one window first
(`SlidingWindowLimiter.hold_window`). The signs of one: this process asked for the channel before and
was refused (another held it then), or the channel has sends claimed (`in_flight`, `unconfirmed`)
whose lease still runs (another process claimed or renewed them within a lease: a fresh worker taking
over from a dead one has asked nothing before).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Protocol

import psycopg

from wagate.outbox.notify import libpq_url

log = logging.getLogger(__name__)

# The first half of the two-int advisory lock key: wagate's channel locks, apart from anyone else's.
LOCK_CLASS = 0x77A6
# What a dispatcher stamps on the outbox rows it claims (`locked_by`).
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
SESSION_PREFIX = "wagate-locks "


def session_name(worker_id: str) -> str:
    """The name of the locks' session of the dispatcher that stamps `worker_id` (PostgreSQL keeps 63
    bytes of it: cut the same way on both sides, a long host name still matches)."""
    host, _, pid = worker_id.rpartition(":")
    return f"{SESSION_PREFIX}{pid}@{host}"[:63]


APPLICATION_NAME = session_name(WORKER_ID)
LIVE_SESSIONS = """
    SELECT application_name FROM pg_stat_activity
    WHERE datname = current_database() AND application_name LIKE 'wagate-locks %'
"""
# Another process's sends of the channel, claimed or renewed within their lease (outbox/models.py).
# A dead one's count too: it may have sent in the last second before it died, and Meta counts those.
CLAIMED_ELSEWHERE = """
    SELECT EXISTS (
        SELECT 1 FROM outbox
        WHERE kind = 'send_message' AND channel_id = %s AND state IN ('in_flight', 'unconfirmed')
          AND locked_until > %s
    )
"""


class ChannelOwnership(Protocol):
    sole: bool  # this process is the only dispatcher: every channel is its own, asked or not

    async def acquire(self, channel_ids: Iterable[int]) -> set[int]:
        """Take what can be taken of `channel_ids`; returns every channel held now."""
        ...

    def held_elsewhere(self, channel_id: int) -> bool:
        """Whether another process held the channel when this one last asked for it."""
        ...

    def taken_over(self, channel_id: int) -> bool:
        """Whether the channel, just taken, may have been sent for by another process until moments
        ago (asked once per taking: the answer is forgotten)."""
        ...

    async def live_sessions(self) -> set[str] | None:
        """The names of the locks' sessions of every dispatcher alive now (`session_name`); None
        when that cannot be known (one process, or the locks' connection is away)."""
        ...

    async def close(self) -> None: ...


class SingleProcessOwnership:
    sole = True

    def __init__(self) -> None:
        self.held: set[int] = set()

    async def acquire(self, channel_ids: Iterable[int]) -> set[int]:
        self.held |= set(channel_ids)
        return set(self.held)

    def held_elsewhere(self, channel_id: int) -> bool:
        return False

    def taken_over(self, channel_id: int) -> bool:
        return False  # no other process sends

    async def live_sessions(self) -> set[str] | None:
        return None

    async def close(self) -> None:
        self.held.clear()


class AdvisoryLockOwnership:
    sole = False

    def __init__(self, database_url: str) -> None:
        self.url = libpq_url(database_url)
        self.conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self.held: set[int] = set()
        self.refused: set[int] = set()  # asked for and held by another process at the time
        self.handed_over: set[int] = set()  # taken, with a sign that another sent for it lately

    async def _connection(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        if self.conn is not None and not self.conn.closed:
            try:
                await self.conn.execute("SELECT 1")
                return self.conn
            except psycopg.Error:
                log.warning("lost the connection holding channel locks; taking them again")
        await self._drop()
        self.conn = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, application_name=APPLICATION_NAME
        )
        return self.conn

    async def _drop(self) -> None:
        """Hold nothing: the locks' session is closed (should it live on, it would keep them from
        every process, this one included), and whatever was held is free for others."""
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                await self.conn.close()
        self.conn = None
        self.held.clear()
        self.handed_over.clear()

    async def acquire(self, channel_ids: Iterable[int]) -> set[int]:
        try:
            conn = await self._connection()
            for channel_id in sorted(set(channel_ids) - self.held):
                # Not re-asked for held channels: a session lock taken twice must be released twice.
                cursor = await conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, channel_id))
                row = await cursor.fetchone()
                if row is None or not row[0]:
                    self.refused.add(channel_id)
                    continue
                self.held.add(channel_id)
                if channel_id in self.refused or await self._claimed_elsewhere(conn, channel_id):
                    self.handed_over.add(channel_id)
                self.refused.discard(channel_id)
        except psycopg.Error as exc:
            # Without the locks' connection this process holds no channel: its lanes must stop (the
            # dispatcher stops those not returned), or they would send beside the next owner.
            log.warning("channel locks unavailable (%r); holding none until they can be taken", exc)
            await self._drop()
        return set(self.held)

    async def _claimed_elsewhere(
        self, conn: psycopg.AsyncConnection[tuple[object, ...]], channel_id: int
    ) -> bool:
        cursor = await conn.execute(CLAIMED_ELSEWHERE, (channel_id, datetime.now(UTC)))
        row = await cursor.fetchone()
        return bool(row and row[0])

    def held_elsewhere(self, channel_id: int) -> bool:
        return channel_id in self.refused

    async def live_sessions(self) -> set[str] | None:
        try:
            conn = await self._connection()
            cursor = await conn.execute(LIVE_SESSIONS)
            return {str(row[0]) for row in await cursor.fetchall()}
        except psycopg.Error as exc:  # the next `acquire` finds the connection gone and deals with it
            log.warning("cannot tell which dispatchers are alive (%r)", exc)
            return None

    def taken_over(self, channel_id: int) -> bool:
        if channel_id in self.handed_over:
            self.handed_over.discard(channel_id)
            return True
        return False

    async def close(self) -> None:
        if self.conn is not None and not self.conn.closed:
            # Freed now, not when the server gets round to ending the session: the next owner may
            # take the channels at once.
            with contextlib.suppress(psycopg.Error):
                await self.conn.execute("SELECT pg_advisory_unlock_all()")
        await self._drop()  # ends the session, which frees its advisory locks anyway


def ownership_for(database_url: str) -> ChannelOwnership:
    if database_url.startswith("sqlite"):
        return SingleProcessOwnership()
    return AdvisoryLockOwnership(database_url)
