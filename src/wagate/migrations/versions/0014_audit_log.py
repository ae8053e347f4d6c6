"""the audit log: who changed an account's keys, webhooks, inbox members and channels, and when

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24 22:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import wagate.core.tables

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("actor_via", sa.String(length=20), nullable=False),
        sa.Column("actor_user_id", sa.Integer(), nullable=True),
        sa.Column("actor_email", sa.String(length=320), nullable=True),
        sa.Column("actor_api_key_id", sa.Integer(), nullable=True),
        sa.Column("actor_api_key_name", sa.String(length=200), nullable=True),
        sa.Column("action", sa.String(length=40), nullable=False),
        sa.Column("target_type", sa.String(length=40), nullable=False),
        sa.Column("target_id", sa.String(length=64), nullable=False),
        sa.Column("changes", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_audit_log_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index("ix_audit_log_account", "audit_log", ["account_id", "id"])
    op.create_index("ix_audit_log_account_action", "audit_log", ["account_id", "action", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_account_action", table_name="audit_log")
    op.drop_index("ix_audit_log_account", table_name="audit_log")
    op.drop_table("audit_log")
