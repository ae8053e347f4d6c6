"""Sign-in attempts counted in the database, shared by every process (issue 45; API.md section 12)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29 06:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from wagate.core.tables import UTCDateTime

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sign_in_counters",
        sa.Column("key_hash", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("window_started_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
    )
    op.create_index("ix_sign_in_counters_window_started_at", "sign_in_counters", ["window_started_at"])


def downgrade() -> None:
    op.drop_index("ix_sign_in_counters_window_started_at", table_name="sign_in_counters")
    op.drop_table("sign_in_counters")
