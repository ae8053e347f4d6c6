"""One subscriber's live changes (`LiveHub.subscribe`): a queue filled from any thread, read on the
subscriber's event loop, and reset when it falls behind."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Sequence

from wagate.core.live import LiveChange, reset_for


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
