"""bulk batches

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21 10:37:33.951945
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import wagate.core.tables

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("channel_id", sa.Integer(), nullable=False),
        sa.Column("template_name", sa.String(length=512), nullable=False),
        sa.Column("template_language", sa.String(length=20), nullable=False),
        sa.Column("template_category", sa.String(length=40), nullable=True),
        sa.Column(
            "status",
            sa.Enum("processing", "completed", name="batchstatus", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("accepted", sa.Integer(), nullable=False),
        sa.Column("rejected", sa.Integer(), nullable=False),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("completed_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("expires_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_batches_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["channel_id"], ["channels.id"], name=op.f("fk_batches_channel_id_channels"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batches")),
    )
    with op.batch_alter_table("batches", schema=None) as batch_op:
        batch_op.create_index("ix_batches_expires_at", ["expires_at"], unique=False)

    op.create_table(
        "batch_recipients",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("batch_id", sa.String(length=40), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("phone_number", sa.String(length=64), nullable=False),
        sa.Column("message_id", sa.String(length=40), nullable=True),
        sa.Column("error", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["batch_id"],
            ["batches.id"],
            name=op.f("fk_batch_recipients_batch_id_batches"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batch_recipients")),
    )
    with op.batch_alter_table("batch_recipients", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_batch_recipients_batch_id"), ["batch_id"], unique=False)

    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("batch_id", sa.String(length=40), nullable=True))
        batch_op.create_index(batch_op.f("ix_outbox_batch_id"), ["batch_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_outbox_batch_id"))
        batch_op.drop_column("batch_id")

    with op.batch_alter_table("batch_recipients", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_batch_recipients_batch_id"))

    op.drop_table("batch_recipients")
    with op.batch_alter_table("batches", schema=None) as batch_op:
        batch_op.drop_index("ix_batches_expires_at")

    op.drop_table("batches")
