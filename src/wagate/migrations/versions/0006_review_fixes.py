"""indexes and limits from the review (issue 9)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 12:20:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The hourly purge of parked statuses older than a day (messages/parked.py) finds them by age.
    with op.batch_alter_table("parked_statuses", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_parked_statuses_received_at"), ["received_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("parked_statuses", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_parked_statuses_received_at"))
