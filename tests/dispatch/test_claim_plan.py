"""A lane's claim reads its channel's next sends in order from `ix_outbox_due`, whatever the outbox's
statistics say (PostgreSQL).

A queue's statistics are taken when it has just drained: autovacuum then finds the periodic jobs
alone, each due at its next run, an hour ahead. By those, `run_at <= now` matches no row, and
PostgreSQL once served the claim from `ix_outbox_kind_due` by that one condition, `run_at` being the
index's second column: every due row of the outbox read and sorted for each claim, so a claim grew
with the backlog (docs/decisions/0004-outbox-claims.md). Here, on a fresh database: those
statistics, then a backlog of one channel's sends, then the plan of the lane's own statement.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, insert, text

from support.crash_matrix import fresh_database
from wagate.core.db import utcnow
from wagate.core.migrate import migrate, sync_url
from wagate.dispatch.send_claims import _claim_sends_statement
from wagate.outbox.models import JobKind, OutboxJob, Priority, outbox_row

BACKLOG = 5000
CHANNEL = 1


def sends(now: datetime, tag: str) -> list[dict[str, Any]]:
    """A backlog of the channel's single and bulk sends, all due."""
    return [
        outbox_row(
            JobKind.send_message,
            payload={"body": {}},
            run_at=now - timedelta(seconds=1),
            priority=Priority.single if n % 10 == 0 else Priority.bulk,
            now=now,
            channel_id=CHANNEL,
            message_id=f"msg_{tag}_{n}",
        )
        for n in range(BACKLOG)
    ]


def test_a_claim_reads_its_channels_index_on_a_drained_outboxs_statistics(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if not request.getfixturevalue("postgres_available"):
        pytest.skip("no PostgreSQL server (set WAGATE_TEST_POSTGRES_URL); CI runs these")
    with fresh_database("postgresql", tmp_path) as url:
        migrate(url)
        engine = create_engine(sync_url(url))
        try:
            now = utcnow()
            with engine.begin() as connection:  # sends come and gone, then the periodic jobs put back
                connection.execute(insert(OutboxJob), sends(now, "sent"))
                connection.execute(text("DELETE FROM outbox"))
                connection.execute(
                    insert(OutboxJob),
                    [
                        outbox_row(
                            kind,
                            payload={},
                            run_at=now + timedelta(hours=1),
                            priority=Priority.background,
                            now=now,
                        )
                        for kind in (JobKind.sync_templates, JobKind.purge_expired)
                    ],
                )
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                connection.execute(text("ANALYZE outbox"))
            with engine.begin() as connection:
                connection.execute(insert(OutboxJob), sends(now, "due"))

            statement = _claim_sends_statement(False, "postgresql")
            compiled = statement.compile(dialect=engine.dialect)
            params = {
                **compiled.params,
                "claim_channel": CHANNEL,
                "claim_now": utcnow(),
                "claim_limit": 25,
                "claim_worker": "test:1",
                "claim_until": utcnow() + timedelta(seconds=30),
            }
            with engine.connect() as connection:
                explained = connection.exec_driver_sql(
                    f"EXPLAIN {compiled}", compiled.construct_params(params)
                )
                plan = "\n".join(row[0] for row in explained)
                connection.rollback()
        finally:
            engine.dispose()
    assert "ix_outbox_due" in plan, plan
    assert "ix_outbox_kind_due" not in plan, plan
