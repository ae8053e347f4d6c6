"""Meta webhook bodies (and other rows) that could not be applied, for an operator; parked statuses
keep their channel

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 12:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import wagate.core.tables

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dead_letters",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("reference", sa.String(length=80), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dead_letters")),
    )
    # Statuses parked before this revision have none: they match by wamid alone.
    with op.batch_alter_table("parked_statuses", schema=None) as batch_op:
        batch_op.add_column(sa.Column("channel_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("parked_statuses", schema=None) as batch_op:
        batch_op.drop_column("channel_id")
    op.drop_table("dead_letters")
