"""A small time-bounded cache for what every request looks up: API keys, inbox access, templates,
and `Caches`, the shelf on which each domain keeps its own caches in a process.

Each process keeps its own; an entry is trusted for `ttl` seconds, so a revoked key, a removed member
or a template that Meta stopped approving takes effect everywhere within that time (and at once in the
process that made the change, which clears what it changed).

A key that is missing or stale is loaded once however many requests ask for it meanwhile: they all
wait for that one load. Without it, the moment an entry ran out every request in flight (64 at a
time under load) ran the same query, and on PostgreSQL the read pool opened and closed connections
for them on the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from wagate.core.db import Database

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")

DEFAULT_TTL_SECONDS = 5.0


class TTLCache(Generic[K, V]):
    def __init__(self, ttl: float = DEFAULT_TTL_SECONDS, max_entries: int = 10_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: dict[K, tuple[float, V]] = {}
        self._loading: dict[K, asyncio.Task[V]] = {}

    async def get_or_load(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        """The cached value, or `load()`'s (cached unless it raises, so errors are never remembered).
        Callers that come while a key is loading wait for that load and get its value or its error."""
        entry = self._entries.get(key)
        if entry is not None and entry[0] > time.monotonic():
            return entry[1]
        task = self._loading.get(key)
        if task is None:
            task = asyncio.ensure_future(load())
            self._loading[key] = task
            task.add_done_callback(lambda done: self._loaded(key, done))
        # A caller cancelled while it waits leaves the load to the others.
        return await asyncio.shield(task)

    def _loaded(self, key: K, task: asyncio.Task[V]) -> None:
        # Read here, an error is never reported as unretrieved when no caller was left to get it.
        failed = task.cancelled() or task.exception() is not None
        if self._loading.get(key) is not task:
            return  # discarded while it loaded: what it read may predate the change
        del self._loading[key]
        if failed:
            return
        if len(self._entries) >= self.max_entries:
            self._entries.clear()  # crude, but bounded: a cache, not a store
        self._entries[key] = (time.monotonic() + self.ttl, task.result())

    def discard(self, key: K) -> None:
        self._entries.pop(key, None)
        self._loading.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()
        self._loading.clear()


class Part(Generic[T]):
    """One thing a domain keeps in memory for the whole process (a cache, a set of keys in flight),
    declared beside the code that uses it and made on first use: `caches[PRINCIPALS]`."""

    def __init__(self, name: str, make: Callable[[], T]) -> None:
        self.name = name
        self.make = make

    def __repr__(self) -> str:
        return f"Part({self.name!r})"


class Caches:
    """What the process remembers between requests, one shelf shared by the API, the pages and the
    dispatcher. It knows no domain: each declares its `Part`s and the functions that load them (for
    example wagate.channels.service.channel_for_caller), so the runtime value that carries the shelf
    sits below the domains and a cache lives beside the query it saves."""

    def __init__(self, db: Database) -> None:
        self.db = db  # where the parts' loaders read
        self._parts: dict[Part[Any], Any] = {}

    def __getitem__(self, part: Part[T]) -> T:
        try:
            found: T = self._parts[part]
        except KeyError:
            found = self._parts[part] = part.make()
        return found
