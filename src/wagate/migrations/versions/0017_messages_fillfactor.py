"""messages: room on each page for a message's later versions (PostgreSQL)

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27 18:00:00.000000

A message is written once and then changed three or four times (the send's outcome, then Meta's
`sent`, `delivered`, `read`). PostgreSQL can write a row's new version beside the old one without
touching the table's six indexes (a HOT update) only when the page has room and no indexed column
changed; with full pages, 14 % of the updates of `bench/statuses.py` were HOT, with 30 % of each page
kept free 50 % were, and PostgreSQL's CPU a status fell by 5-10 % (docs/performance.md, "Tenth
pass"). The table takes that much more room before its rows change; new pages only (existing rows
stay where they are until they are updated). SQLite has no such setting.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE messages SET (fillfactor = 70)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE messages RESET (fillfactor)")
