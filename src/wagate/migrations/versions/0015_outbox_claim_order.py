"""a channel's due sends in the order a lane claims them: (priority, id) read from the index

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27 07:10:00.000000

With `run_at` as the index's last column, a claim (`ORDER BY priority, id LIMIT n`) read every due
row of the channel and sorted them: behind a bulk backlog of 300,000 rows (about an hour at 80/s; a
channel may queue four) a claim took 55-66 ms on PostgreSQL, its sort spilling to disk. With `id`
instead, the claim reads rows in its own order and stops after `n` (0.06 ms); `run_at <= now` is
checked on the rows read. `bench/backlog.py` measures it.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_index("ix_outbox_due")
        batch.create_index("ix_outbox_due", ["channel_id", "state", "priority", "id"])


def downgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_index("ix_outbox_due")
        batch.create_index("ix_outbox_due", ["channel_id", "state", "priority", "run_at"])
