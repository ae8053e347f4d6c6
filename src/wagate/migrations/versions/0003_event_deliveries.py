"""event deliveries

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 09:49:27.732426
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import wagate.core.tables

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "deliveries",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("webhook_id", sa.Integer(), nullable=True),
        sa.Column("url", sa.String(length=2000), nullable=True),
        sa.Column("secret_encrypted", sa.String(length=500), nullable=True),
        sa.Column("message_id", sa.String(length=40), nullable=True),
        sa.Column(
            "kind",
            sa.Enum(
                "message_updated",
                "message_created",
                "conversation_status_changed",
                "batch_completed",
                "message_status",
                name="deliverykind",
                native_enum=False,
                length=40,
            ),
            nullable=False,
        ),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column(
            "state",
            sa.Enum("pending", "delivered", "failed", name="deliverystate", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("finished_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_deliveries_account_id_accounts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhooks.id"],
            name=op.f("fk_deliveries_webhook_id_webhooks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deliveries")),
    )
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.create_index("ix_deliveries_finished", ["finished_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_deliveries_message_id"), ["message_id"], unique=False)
        batch_op.create_index("ix_deliveries_webhook", ["webhook_id", "id"], unique=False)

    op.create_table(
        "delivery_attempts",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("delivery_id", sa.String(length=40), nullable=False),
        sa.Column("attempted_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("status_code", sa.SmallInteger(), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(length=500), nullable=True),
        sa.Column("response", sa.String(length=1000), nullable=True),
        sa.Column("succeeded", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["deliveries.id"],
            name=op.f("fk_delivery_attempts_delivery_id_deliveries"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_delivery_attempts")),
    )
    with op.batch_alter_table("delivery_attempts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_delivery_attempts_delivery_id"), ["delivery_id"], unique=False)

    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("ordering_key", sa.String(length=80), nullable=True))
        batch_op.create_index("ix_outbox_ordering", ["ordering_key", "id"], unique=False)

    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        # Existing webhooks start with no failures.
        batch_op.add_column(
            sa.Column("consecutive_failures", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("failing_since", wagate.core.tables.UTCDateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("webhooks", schema=None) as batch_op:
        batch_op.drop_column("failing_since")
        batch_op.drop_column("consecutive_failures")

    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_outbox_ordering")
        batch_op.drop_column("ordering_key")

    with op.batch_alter_table("delivery_attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_delivery_attempts_delivery_id"))

    op.drop_table("delivery_attempts")
    with op.batch_alter_table("deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_deliveries_webhook")
        batch_op.drop_index(batch_op.f("ix_deliveries_message_id"))
        batch_op.drop_index("ix_deliveries_finished")

    op.drop_table("deliveries")
