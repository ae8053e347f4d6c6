"""A small time-bounded cache for what every request looks up: API keys, inbox access, templates.

Each process keeps its own; an entry is trusted for `ttl` seconds, so a revoked key, a removed member
or a template that Meta stopped approving takes effect everywhere within that time (and at once in the
process that made the change, which clears what it changed).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

DEFAULT_TTL_SECONDS = 5.0


class TTLCache(Generic[K, V]):
    def __init__(self, ttl: float = DEFAULT_TTL_SECONDS, max_entries: int = 10_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: dict[K, tuple[float, V]] = {}

    async def get_or_load(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        """The cached value, or `load()`'s (cached unless it raises, so errors are never remembered)."""
        now = time.monotonic()
        entry = self._entries.get(key)
        if entry is not None and entry[0] > now:
            return entry[1]
        value = await load()
        if len(self._entries) >= self.max_entries:
            self._entries.clear()  # crude, but bounded: a cache, not a store
        self._entries[key] = (now + self.ttl, value)
        return value

    def discard(self, key: K) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()
