"""Meta webhook bodies (and other rows) that could not be applied, for an operator

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 12:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
