"""A lane's claim behind a channel's bulk backlog: how long taking the next sends takes as the queue grows.

A channel may queue `WAGATE_BULK_BACKLOG_MAX_SECONDS` (4 h) of bulk sends at its rate: at 80/s that is
1.15 million outbox rows, and its lane claims the next few many times a second. For each backlog
size and database this script:

1. makes a fresh database (`wagate migrate`; PostgreSQL: a throwaway database on 127.0.0.1:5432),
2. fills the outbox with that many due bulk sends of one channel and runs `ANALYZE` (as autovacuum
   does in a running deployment); with `--stale-statistics`, `VACUUM ANALYZE` runs once, before the
   first fill, on an outbox that has just drained (10,000 sends come and gone, the two periodic
   jobs left): a queue's statistics are always older than its rows, and the claim's plan must not
   depend on them,
3. times `claim_sends` (the lane's own function: 25 rows, best priority first, then by id) `--claims`
   times, each in a transaction rolled back so the backlog stays the same; p50 / p90 in ms.

    .venv/bin/python bench/backlog.py [--sizes 1000,100000,300000] [--databases sqlite,postgresql]
                                      [--stale-statistics]

docs/performance.md ("A claim behind a backlog") records a run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import (
    add_databases_option,
    database_for,
    databases_of,
    latency_summary_ms,
    run_command,
    utc_stamp,
    wagate_command,
)
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from wagate.core.migrate import sync_url
from wagate.dispatch.send_claims import claim_sends

CLAIM_SIZE = 25

# One statement per backlog: the rows a bulk batch leaves (priority 1, due, unclaimed) for channel 1.
FILL_POSTGRES = """
INSERT INTO outbox (kind, state, priority, channel_id, account_id, message_id, payload, run_at,
                    attempts, created_at)
SELECT 'send_message', 'ready', 1, 1, 1, 'msg_' || g, '{"body": {"to": "994551234567"}}',
       now() - interval '1 hour', 0, now()
FROM generate_series(1, :rows) AS g
"""
FILL_SQLITE = """
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :rows)
INSERT INTO outbox (kind, state, priority, channel_id, account_id, message_id, payload, run_at,
                    attempts, created_at)
SELECT 'send_message', 'ready', 1, 1, 1, 'msg_' || n, '{"body": {"to": "994551234567"}}',
       datetime('now', '-1 hour'), 0, datetime('now')
FROM g
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,100000,300000", help="backlog sizes, comma-separated")
    add_databases_option(parser)
    parser.add_argument("--claims", type=int, default=30, help="claims timed per size")
    parser.add_argument(
        "--stale-statistics",
        action="store_true",
        help="analyze the outbox once, just drained (periodic jobs only; autovacuum then off on "
        "PostgreSQL), instead of after each fill",
    )
    settings = parser.parse_args(argv)
    settings.databases = databases_of(parser, settings.databases)
    return settings


PERIODIC_JOBS = """
INSERT INTO outbox (kind, state, priority, payload, run_at, attempts, created_at)
VALUES ('purge_expired', 'ready', 2, '{}', :later, 0, :now),
       ('sync_templates', 'ready', 2, '{}', :later, 0, :now)
"""


def drained(engine: Engine, fill: str) -> None:
    """The statistics of an outbox that has just drained: taken when it held its periodic jobs, each
    due at its next run (the template sync and the purge come back hourly), so that every `run_at` the
    statistics know of is in the future."""
    now = datetime.now(UTC)
    with engine.begin() as connection:  # each periodic job is put back after its run: behind the sends
        connection.execute(text(fill), {"rows": 10_000})
        connection.execute(text("DELETE FROM outbox WHERE kind = 'send_message'"))
        connection.execute(text(PERIODIC_JOBS), {"now": now, "later": now + timedelta(hours=1)})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM"))
        connection.execute(text("ANALYZE"))
        if engine.dialect.name == "postgresql":  # and they stay so while the backlog grows
            connection.execute(text("ALTER TABLE outbox SET (autovacuum_enabled = false)"))


def measure(url: str, sizes: list[int], claims: int, *, stale: bool = False) -> list[dict]:
    run_command([*wagate_command(), "migrate"], env={**os.environ, "WAGATE_DATABASE_URL": url})
    engine = create_engine(sync_url(url))
    fill = FILL_SQLITE if engine.dialect.name == "sqlite" else FILL_POSTGRES
    if stale:
        drained(engine, fill)
    rows: list[dict] = []
    filled = 0
    try:
        for size in sizes:
            with engine.begin() as connection:
                connection.execute(text(fill), {"rows": size - filled})
                # The backlog's first id is past the drained sends' (--stale-statistics).
                first = connection.execute(
                    text("SELECT min(id) FROM outbox WHERE kind = 'send_message'")
                ).scalar_one()
                connection.execute(text("DELETE FROM outbox WHERE id >= :end"), {"end": first + size})
            filled = size
            if not stale:
                with engine.begin() as connection:
                    connection.execute(text("ANALYZE"))
            seconds = []
            for _ in range(claims):
                with Session(engine) as session:
                    started = time.perf_counter()
                    taken = claim_sends(
                        session, channel_id=1, limit=CLAIM_SIZE, worker_id="bench", lease_seconds=30
                    )
                    seconds.append(time.perf_counter() - started)
                    session.rollback()
                if len(taken) != min(CLAIM_SIZE, size):
                    raise RuntimeError(f"a claim took {len(taken)} rows of a backlog of {size}")
            rows.append({"backlog": size, **latency_summary_ms(seconds)})
    finally:
        engine.dispose()
    return rows


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    sizes = sorted(int(s) for s in settings.sizes.split(","))
    print(f"claims behind a backlog, {utc_stamp()}: {CLAIM_SIZE} rows each, {settings.claims} claims a size")
    print(f"{'database':<12} {'backlog':>9} {'p50 ms':>8} {'p90 ms':>8}")
    for database in settings.databases:
        with database_for(database) as place, tempfile.TemporaryDirectory(prefix="wagate-backlog-") as tmp:
            if place is None:
                continue
            url = place[0] or f"sqlite+aiosqlite:///{Path(tmp) / 'backlog.db'}"
            for row in measure(url, sizes, settings.claims, stale=settings.stale_statistics):
                print(f"{database:<12} {row['backlog']:>9} {row['p50_ms']:>8.2f} {row['p90_ms']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
