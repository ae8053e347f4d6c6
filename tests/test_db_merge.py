"""Mergeable units (wagate.core.db): single sends that share a batch share its statements. What a user
relies on: each caller gets its own result, in order, and a unit that fails loses only itself."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from wagate.core.db import Database
from wagate.core.units import Mergeable


def _store(calls: list[list[int]], session: Session, items: list[int]) -> list[int]:
    """One statement for all the items (an executemany); fails as a whole if any of them is negative."""
    calls.append(list(items))
    if any(item < 0 for item in items):
        raise ValueError(f"no negative values: {items}")
    session.execute(text("INSERT INTO merged (v) VALUES (:v)"), [{"v": item} for item in items])
    return [item * 10 for item in items]


def test_mergeable_units_of_a_batch_run_as_one_and_a_failing_one_loses_only_itself(database_url: str) -> None:
    calls: list[list[int]] = []

    def store(session: Session, items: list[int]) -> list[int]:
        return _store(calls, session, items)

    def other_key(session: Session, items: list[int]) -> list[int]:
        return _store(calls, session, items)

    async def scenario() -> tuple[list[int], list[list[int]], list[Any], list[list[int]], list[int]]:
        db = Database(database_url, pool_size=2)
        try:
            await db.write(lambda s: s.execute(text("CREATE TABLE merged (v INTEGER PRIMARY KEY)")))
            calls.clear()
            # Queued together, so they share a batch: three of key "a", one of key "b".
            merged = list(
                await asyncio.gather(
                    db.write(Mergeable("a", 1, store)),
                    db.write(Mergeable("b", 2, store)),
                    db.write(Mergeable("a", 3, store)),
                    db.write(Mergeable("a", 4, store)),
                    db.write(Mergeable("a", 5, other_key)),  # another kind of unit: not merged with "a"
                )
            )
            first_calls = [sorted(c) for c in calls]
            calls.clear()
            failing = list(
                await asyncio.gather(
                    db.write(Mergeable("a", 6, store)),
                    db.write(Mergeable("a", -7, store)),
                    db.write(Mergeable("a", 8, store)),
                    return_exceptions=True,
                )
            )
            async with db.read() as reader:
                stored = sorted(v for (v,) in await reader.execute(text("SELECT v FROM merged")))
            return merged, first_calls, failing, [sorted(c) for c in calls], stored
        finally:
            await db.dispose()

    merged, first_calls, failing, retry_calls, stored = asyncio.run(scenario())
    assert merged == [10, 20, 30, 40, 50], merged  # each caller its own result
    assert sorted(first_calls) == [[1, 3, 4], [2], [5]], first_calls
    assert failing[0] == 60 and failing[2] == 80, failing
    assert isinstance(failing[1], ValueError), failing
    # Merged first and failed as one; then each alone, in its own savepoint.
    assert retry_calls == [[-7, 6, 8], [6], [-7], [8]], retry_calls
    assert stored == [1, 2, 3, 4, 5, 6, 8]
