"""the dashboard: signed-in browsers, the agent who sent a message, the indexes of the conversation list

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 19:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import wagate.core.tables

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dashboard_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_dashboard_sessions_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dashboard_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_dashboard_sessions_token_hash")),
    )
    op.create_index(op.f("ix_dashboard_sessions_user_id"), "dashboard_sessions", ["user_id"])
    op.create_index(op.f("ix_dashboard_sessions_expires_at"), "dashboard_sessions", ["expires_at"])
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("agent_user_id", sa.Integer(), nullable=True))
    # The list reads these two in order; they replace the indexes of account_id and last_activity_at
    # alone, which nothing reads (a send updates every index of its conversation row).
    op.create_index(
        "ix_conversations_account_list", "conversations", ["account_id", "status", "last_activity_at", "id"]
    )
    op.create_index(
        "ix_conversations_inbox_list", "conversations", ["channel_id", "status", "last_activity_at", "id"]
    )
    op.drop_index("ix_conversations_last_activity_at", table_name="conversations")
    op.drop_index("ix_conversations_account_id", table_name="conversations")


def downgrade() -> None:
    op.create_index("ix_conversations_account_id", "conversations", ["account_id"])
    op.create_index("ix_conversations_last_activity_at", "conversations", ["last_activity_at"])
    op.drop_index("ix_conversations_inbox_list", table_name="conversations")
    op.drop_index("ix_conversations_account_list", table_name="conversations")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("agent_user_id")
    op.drop_index(op.f("ix_dashboard_sessions_expires_at"), table_name="dashboard_sessions")
    op.drop_index(op.f("ix_dashboard_sessions_user_id"), table_name="dashboard_sessions")
    op.drop_table("dashboard_sessions")
