"""Live changes for the dashboard: what just changed in an account (a new message, a message's status,
a conversation's status), told to the pages that show it once the transaction that made it commits.

- A unit of work records changes with `record_live(session, changes)`, beside the events it writes.
  They wait in the session's info (`wagate.core.units.COMMIT_NOTES`); the database gives the changes of the
  units that committed to its commit listeners, which `LiveHub` is; a unit rolled back (alone, in its
  savepoint, or with its whole batch) takes its changes with it.
- The hub hands them to this process's subscribers (`LiveHub.subscribe`). On PostgreSQL it also tells
  the other processes: NOTIFY on `wagate_live`, after the commit and from a connection of its own, one
  statement per round of commits, never inside a send's transaction (a NOTIFY there serializes the
  commits: docs/performance.md). Every serving process LISTENs on that channel (`start`) and hands
  what the others committed to its own subscribers; its own changes it delivered already.
- A subscriber that falls behind loses its queue and gets one `reset` change instead, as it does when
  the LISTEN connection was lost: changes may have been missed, so the page reloads what it shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import psycopg
from sqlalchemy.orm import Session

from wagate.core.db import Database
from wagate.core.units import COMMIT_NOTES

log = logging.getLogger(__name__)
CHANNEL = "wagate_live"
# PostgreSQL refuses a NOTIFY payload of 8000 bytes or more; a round of changes is split below that.
PAYLOAD_LIMIT = 7900
QUEUE_LIMIT = 1000  # changes a subscriber may have waiting before it is reset
START_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 5.0
RECONNECT_SECONDS = 1.0


class LiveKind(StrEnum):
    message = "message"  # a new message, either direction
    status = "status"  # a message's status moved
    conversation = "conversation"  # a conversation's status changed
    reset = "reset"  # changes may have been missed: reload (only ever delivered, never recorded)


@dataclass(frozen=True, slots=True)
class LiveChange:
    account_id: int
    channel_id: int
    conversation_id: int
    kind: str  # a LiveKind
    inbound: bool = False  # a customer's message
    conversation_status: str | None = None  # the conversation's status after the change, when known
    message_id: str | None = None


def record_live(session: Session, changes: Iterable[LiveChange]) -> None:
    """Inside a unit of work: `changes` are published once its transaction commits, never if it rolls
    back. Costs an append per change: this runs in every send's unit."""
    notes: list[Any] | None = session.info.get(COMMIT_NOTES)
    if notes is None:
        notes = session.info[COMMIT_NOTES] = []
    notes.extend(changes)


def reset_for(account_id: int) -> LiveChange:
    return LiveChange(account_id, 0, 0, LiveKind.reset)


class LiveFeed:
    """One subscriber's changes of one account, in the order they were committed (in this process;
    another process's come in the order it committed them): `async for change in feed`.

    Ends (StopAsyncIteration) when the hub stops. A subscriber with `limit` changes waiting loses them
    and the changes that would overflow, and gets a single `reset` change in their place."""

    def __init__(self, account_id: int, limit: int) -> None:
        self.account_id = account_id
        self._limit = limit
        self._queue: deque[LiveChange] = deque()
        self._ready = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._closed = False

    def __aiter__(self) -> LiveFeed:
        return self

    async def __anext__(self) -> LiveChange:
        while not self._queue:
            if self._closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()
        return self._queue.popleft()

    async def next_within(self, seconds: float) -> LiveChange | None:
        """The next change, or None when none came within `seconds` (StopAsyncIteration once the feed
        ended). A change that comes as the time runs out is kept for the next call."""
        if not self._queue and not self._closed and seconds > 0:
            self._ready.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._ready.wait()
        if self._queue:
            return self._queue.popleft()
        if self._closed:
            raise StopAsyncIteration
        return None

    @property
    def waiting(self) -> int:
        """Changes delivered and not yet taken."""
        return len(self._queue)

    def deliver(self, changes: Sequence[LiveChange]) -> None:
        """From any thread."""
        if threading.get_ident() == self._thread:
            self._put(changes)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._put, changes)

    def reset(self) -> None:
        self.deliver([reset_for(self.account_id)])

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def _put(self, changes: Sequence[LiveChange]) -> None:
        if len(self._queue) + len(changes) > self._limit:
            self._queue.clear()
            self._queue.append(reset_for(self.account_id))
        else:
            self._queue.extend(changes)
        self._ready.set()


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


# The wire format of a notification: `<origin>|<change>;<change>...`, each change
# `account,channel,conversation,kind,conversation status,message id` with one letter for the kind
# (`i` an inbound message) and the usual statuses. Message ids are ours (`msg_` and base32).
_KIND_CODES: dict[tuple[str, bool], str] = {
    (LiveKind.message, False): "m",
    (LiveKind.message, True): "i",
    (LiveKind.status, False): "s",
    (LiveKind.status, True): "S",
    (LiveKind.conversation, False): "c",
    (LiveKind.conversation, True): "C",
}
_KINDS = {code: (LiveKind(kind), inbound) for (kind, inbound), code in _KIND_CODES.items()}
_STATUS_CODES = {"open": "o", "pending": "p", "resolved": "r"}
_STATUSES = {code: status for status, code in _STATUS_CODES.items()}


def _encode(change: LiveChange) -> str | None:
    kind = _KIND_CODES.get((change.kind, change.inbound))
    status = change.conversation_status or ""
    status = _STATUS_CODES.get(status, status)
    entry = (
        f"{change.account_id},{change.channel_id},{change.conversation_id},{kind},{status},"
        f"{change.message_id or ''}"
    )
    if kind is None or "|" in entry or ";" in entry or entry.count(",") != 5:
        return None
    return entry


def encode_changes(origin: str, changes: Sequence[LiveChange], limit: int = PAYLOAD_LIMIT) -> list[str]:
    """The payloads of NOTIFY for `changes`, in order, each under `limit` bytes."""
    head = f"{origin}|"
    payloads: list[str] = []
    entries: list[str] = []
    size = len(head)
    for change in changes:
        if change.kind == LiveKind.reset:
            continue  # a listener's own business, never sent
        entry = _encode(change)
        if entry is None:
            log.warning("a live change that cannot be sent: %r", change)
            continue
        cost = len(entry.encode()) + 1
        if entries and size + cost > limit:
            payloads.append(head + ";".join(entries))
            entries, size = [], len(head)
        entries.append(entry)
        size += cost
    if entries:
        payloads.append(head + ";".join(entries))
    return payloads


def decode_changes(payload: str) -> tuple[str, list[LiveChange]]:
    """(origin, changes) of a payload made by `encode_changes`; ValueError when it is not one."""
    origin, bar, body = payload.partition("|")
    if not bar:
        raise ValueError("no origin")
    changes = []
    for entry in body.split(";"):
        account, channel, conversation, code, status, message_id = entry.split(",")
        if code not in _KINDS:
            raise ValueError(f"unknown kind {code!r}")
        kind, inbound = _KINDS[code]
        changes.append(
            LiveChange(
                int(account),
                int(channel),
                int(conversation),
                kind,
                inbound=inbound,
                conversation_status=_STATUSES.get(status, status) or None,
                message_id=message_id or None,
            )
        )
    return origin, changes
