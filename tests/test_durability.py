"""A 201 means the message is on disk: the connections that commit writes keep the databases' durable
settings, whatever the performance work on the write path does (issue 18: never weaken durability)."""

from __future__ import annotations

import asyncio

from sqlalchemy import text
from sqlalchemy.orm import Session

from wagate.core.db import Database

# SQLite's `PRAGMA synchronous` values: 2 is FULL, which syncs the WAL at every commit (NORMAL, 1,
# would lose the last commits on a power cut).
SQLITE_FULL = 2


def _settings(url: str) -> list[tuple[str, ...]]:
    """The durability settings each of the writer's ways to commit runs with: the group commit, a
    large unit beside it and a claim beside it (on SQLite all three are the one writer)."""

    def sqlite(session: Session) -> tuple[str, ...]:
        synchronous = session.execute(text("PRAGMA synchronous")).scalar_one()
        journal = session.execute(text("PRAGMA journal_mode")).scalar_one()
        return str(synchronous), str(journal)

    def postgres(session: Session) -> tuple[str, ...]:
        # `fsync` is the server's own setting, not ours to check; `synchronous_commit` a session can
        # turn off (the live feed's NOTIFY connection does: it carries no data).
        return (str(session.execute(text("SHOW synchronous_commit")).scalar_one()),)

    unit = sqlite if url.startswith("sqlite") else postgres

    async def read_all() -> list[tuple[str, ...]]:
        db = Database(url)
        try:
            return [
                await db.write(unit),
                await db.write(unit, large=True),
                await db.write(unit, claim=True),
            ]
        finally:
            await db.dispose()

    return asyncio.run(read_all())


def test_every_write_commits_durably(database_url: str) -> None:
    expected = (str(SQLITE_FULL), "wal") if database_url.startswith("sqlite") else ("on",)
    assert _settings(database_url) == [expected] * 3
