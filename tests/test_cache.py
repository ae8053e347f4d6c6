"""The lookups' cache: a key that runs out is loaded once, however many requests ask for it meanwhile
(before, each request in flight ran its own query at that moment)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from wagate.core.cache import TTLCache


def in_a_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


class Loader:
    """Counts its loads; each waits until `release` is set, so callers can pile up meanwhile."""

    def __init__(self, value: str = "value", error: Exception | None = None) -> None:
        self.calls = 0
        self.value = value
        self.error = error
        self.release = asyncio.Event()

    async def __call__(self) -> str:
        self.calls += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return f"{self.value}-{self.calls}"


@in_a_loop
async def test_callers_during_a_load_share_it() -> None:
    cache: TTLCache[str, str] = TTLCache()
    load = Loader()
    callers = [asyncio.create_task(cache.get_or_load("key", load)) for _ in range(64)]
    await asyncio.sleep(0)
    load.release.set()
    assert await asyncio.gather(*callers) == ["value-1"] * 64
    assert load.calls == 1
    assert await cache.get_or_load("key", load) == "value-1"  # and it is cached
    assert load.calls == 1


@in_a_loop
async def test_a_failed_load_fails_its_waiters_and_is_not_remembered() -> None:
    cache: TTLCache[str, str] = TTLCache()
    failing = Loader(error=RuntimeError("the database went away"))
    callers = [asyncio.create_task(cache.get_or_load("key", failing)) for _ in range(3)]
    await asyncio.sleep(0)
    failing.release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert [str(result) for result in results] == ["the database went away"] * 3
    assert failing.calls == 1
    working = Loader()
    working.release.set()
    assert await cache.get_or_load("key", working) == "value-1"


@in_a_loop
async def test_a_cancelled_caller_leaves_the_load_to_the_others() -> None:
    cache: TTLCache[str, str] = TTLCache()
    load = Loader()
    first = asyncio.create_task(cache.get_or_load("key", load))
    second = asyncio.create_task(cache.get_or_load("key", load))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    load.release.set()
    assert await second == "value-1"
    with pytest.raises(asyncio.CancelledError):
        await first
    assert load.calls == 1


@in_a_loop
async def test_a_key_discarded_during_its_load_is_read_again() -> None:
    """The process that changed a key (a revoked API key) discards it: a load that began before the
    change may have read the old row, so it is not kept, and the next caller loads anew."""
    cache: TTLCache[str, str] = TTLCache()
    before = Loader("before")
    waiting = asyncio.create_task(cache.get_or_load("key", before))
    await asyncio.sleep(0)
    cache.discard("key")
    after = Loader("after")
    after.release.set()
    assert await cache.get_or_load("key", after) == "after-1"
    before.release.set()
    assert await waiting == "before-1"  # the caller from before the change gets what it waited for
    assert await cache.get_or_load("key", before) == "after-1"  # the cache keeps the newer read


@in_a_loop
async def test_an_entry_runs_out_after_its_ttl() -> None:
    cache: TTLCache[str, str] = TTLCache(ttl=0.05)
    load = Loader()
    load.release.set()
    assert await cache.get_or_load("key", load) == "value-1"
    await asyncio.sleep(0.08)
    assert await cache.get_or_load("key", load) == "value-2"
