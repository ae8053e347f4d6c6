"""when each API key was last used, for the settings page

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24 20:15:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import wagate.core.tables

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(
            sa.Column("last_used_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("last_used_at")
