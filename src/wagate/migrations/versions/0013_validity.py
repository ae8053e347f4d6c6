"""a send's validity period: the moment after which it is never sent

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24 20:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import wagate.core.tables

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(
            sa.Column("expires_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("expires_at")
