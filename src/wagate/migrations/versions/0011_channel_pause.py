"""a channel's pause: why and since when Meta refuses the channel itself (its token, its account)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 20:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import wagate.core.tables

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("channels") as batch:
        batch.add_column(sa.Column("paused_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("paused_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("channels") as batch:
        batch.drop_column("paused_at")
        batch.drop_column("paused_reason")
