"""This process's hub of live changes (see `wagate.core.live`): it takes the changes of the units that
committed from the database, hands them to this process's subscribers, and on PostgreSQL tells the
other processes by NOTIFY and hears theirs by LISTEN."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from wagate.core.db import Database
from wagate.core.live import LiveChange
from wagate.core.live_feed import LiveFeed
from wagate.core.live_payloads import decode_changes, encode_changes

log = logging.getLogger(__name__)
CHANNEL = "wagate_live"
QUEUE_LIMIT = 1000  # changes a subscriber may have waiting before it is reset
START_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 5.0
RECONNECT_SECONDS = 1.0


# The name (`application_name`) of an API process's LISTEN session. An API process is what receives
# Meta's webhooks, so a worker reads in `pg_stat_activity` whether one has been up long enough for
# Meta's retried status webhooks to have reached the gateway (dispatch/dispatcher.py,
# `_receiving_since`).
API_SESSION_PREFIX = "wagate-api "
API_SESSION_NAME = f"{API_SESSION_PREFIX}{os.getpid()}@{socket.gethostname()}"[:63]  # PostgreSQL keeps 63


class LiveHub:
    """This process's live changes: from the database's commits, to subscribers and other processes.

    Made beside the `Database` (it listens to its commits). `start` (in `wagate serve`) LISTENs for
    what other processes commit on PostgreSQL; a `wagate worker` never starts it, and only sends.
    """

    def __init__(self, db: Database, *, queue_limit: int = QUEUE_LIMIT) -> None:
        self._url = None if db.is_sqlite else db.url.replace("postgresql+psycopg://", "postgresql://", 1)
        self._queue_limit = queue_limit
        # Replaced, never changed in place, so `publish` may read it from any thread.
        self._feeds: dict[int, tuple[LiveFeed, ...]] = {}
        # Names this hub's notifications, which its own listener skips (a pid alone may repeat on
        # another machine).
        self._origin = f"{os.getpid()}.{secrets.token_hex(4)}"
        self._outgoing: list[LiveChange] = []
        self._sending: asyncio.Task[None] | None = None
        self._sender: psycopg.AsyncConnection[Any] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        # Set once the first LISTEN succeeded or failed: a database down at start-up does not hold the
        # process's start (it answers 503 `not_ready` meanwhile, and the LISTEN keeps trying).
        self._first_try = asyncio.Event()
        db.add_commit_listener(self.committed)

    @asynccontextmanager
    async def subscribe(self, account_id: int) -> AsyncIterator[LiveFeed]:
        """Every change of the account from now on, for as long as the block runs:

        async with gateway.live.subscribe(account_id) as feed:
            async for change in feed:
                ...
        """
        feed = LiveFeed(account_id, self._queue_limit)
        self._feeds = {**self._feeds, account_id: (*self._feeds.get(account_id, ()), feed)}
        try:
            yield feed
        finally:
            others = tuple(f for f in self._feeds.get(account_id, ()) if f is not feed)
            feeds = {k: v for k, v in self._feeds.items() if k != account_id}
            self._feeds = {**feeds, account_id: others} if others else feeds
            feed.close()

    def publish(self, changes: Sequence[LiveChange]) -> None:
        """Hand `changes` to this process's subscribers of their accounts (from any thread)."""
        feeds = self._feeds
        if not feeds:
            return
        by_feed: dict[LiveFeed, list[LiveChange]] = {}
        for change in changes:
            for feed in feeds.get(change.account_id, ()):
                by_feed.setdefault(feed, []).append(change)
        for feed, mine in by_feed.items():
            feed.deliver(mine)

    def committed(self, notes: Sequence[object]) -> None:
        """The database's commit listener (on its event loop): what the units of a batch that just
        committed recorded. Published here at once; on PostgreSQL sent to the other processes by the
        next round of NOTIFY (one at a time, so a round takes all that committed meanwhile)."""
        # The same change twice in one batch (a status that moved twice) is told once.
        changes = list(dict.fromkeys(note for note in notes if isinstance(note, LiveChange)))
        if not changes:
            return
        self.publish(changes)
        if self._url is not None:
            self._outgoing += changes
            if self._sending is None or self._sending.done():
                self._sending = asyncio.get_running_loop().create_task(
                    self._send(), name="wagate-live-notify"
                )

    async def start(self) -> None:
        """PostgreSQL: LISTEN for the other processes' changes (returns once listening, once the first
        try failed, or after START_TIMEOUT_SECONDS; it keeps trying). Nothing to do on SQLite (one
        process)."""
        if self._url is None or self._listener is not None:
            return
        self._listener = asyncio.create_task(self._listen(), name="wagate-live-listen")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_try.wait(), START_TIMEOUT_SECONDS)

    async def stop(self) -> None:
        """Stop listening, send what is still to be sent (a worker's last outcomes), end the feeds."""
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
        if self._sending is not None and not self._sending.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._sending), STOP_TIMEOUT_SECONDS)
            except TimeoutError:
                self._sending.cancel()
                log.warning("live changes not sent to other processes at shutdown")
        if self._sender is not None:
            await self._sender.close()
            self._sender = None
        for feeds in self._feeds.values():
            for feed in feeds:
                feed.close()

    @property
    def listening(self) -> bool:
        return self._listening.is_set()

    async def _send(self) -> None:
        while self._outgoing:
            changes, self._outgoing = list(dict.fromkeys(self._outgoing)), []
            await self._notify(encode_changes(self._origin, changes), len(changes))

    async def _notify(self, payloads: list[str], count: int) -> None:
        assert self._url is not None
        for attempt in (1, 2):
            try:
                if self._sender is None or self._sender.closed:
                    self._sender = await psycopg.AsyncConnection.connect(
                        self._url, autocommit=True, connect_timeout=5
                    )
                    # A notification is no data: its transaction need not wait for the WAL's flush.
                    await self._sender.execute("SET synchronous_commit = off")
                # One transaction for the round, however many notifications it takes.
                await self._sender.execute(
                    "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload", [CHANNEL, payloads]
                )
                return
            except Exception as exc:  # the connection was lost: one more try on a new one
                if self._sender is not None:
                    await self._sender.close()
                    self._sender = None
                if attempt == 2:
                    log.warning("%d live changes not sent to other processes: %r", count, exc)

    async def _listen(self) -> None:
        assert self._url is not None
        lost = False
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._url,
                    autocommit=True,
                    connect_timeout=5,
                    keepalives_idle=30,
                    application_name=API_SESSION_NAME,
                ) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self._listening.set()
                    self._first_try.set()
                    if lost:  # what was committed meanwhile was never heard: the pages reload
                        self._reset_all()
                    async for note in conn.notifies():
                        self._heard(note.payload)
            except asyncio.CancelledError:
                self._listening.clear()
                raise
            except Exception as exc:
                log.warning("live LISTEN connection lost (%r); reconnecting", exc)
            self._first_try.set()
            self._listening.clear()
            lost = True
            await asyncio.sleep(RECONNECT_SECONDS)

    def _heard(self, payload: str) -> None:
        if not self._feeds or payload.startswith(self._origin + "|"):
            return  # nobody here to tell, or our own (delivered at the commit)
        try:
            _, changes = decode_changes(payload)
        except ValueError:
            log.warning("a live change notification that cannot be read: %.200r", payload)
            return
        self.publish(changes)

    def _reset_all(self) -> None:
        for feeds in self._feeds.values():
            for feed in feeds:
                feed.reset()
