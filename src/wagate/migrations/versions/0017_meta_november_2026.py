"""Meta of November 2026 (API.md section 14): template lifecycle, held sends, standby, user id changes

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29 03:00:00.000000

- templates: the quality Meta rates a template with, a recategorisation Meta announced but has not
  made yet, and why Meta rejected (or paused, disabled) it;
- messages: what Meta answered a send with when it did not simply accept it
  (`held_for_quality_assessment`), and who other than the app wrote an outbound message (the replies
  of Meta Business Agent, which arrive as echoes);
- conversations: who holds the conversation (the app, or Meta Business Agent on `standby`);
- customer_ids: the user id a customer moved to (`user_changed_user_id`), so sends by the old id go on.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("templates") as batch:
        batch.add_column(sa.Column("quality", sa.String(20), nullable=True))
        batch.add_column(sa.Column("pending_category", sa.String(40), nullable=True))
        batch.add_column(sa.Column("rejected_reason", sa.String(500), nullable=True))
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("upstream_status", sa.String(40), nullable=True))
        batch.add_column(sa.Column("sent_by", sa.String(40), nullable=True))
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("handled_by", sa.String(30), nullable=False, server_default="app"))
    with op.batch_alter_table("customer_ids") as batch:
        batch.add_column(sa.Column("replaced_by", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("customer_ids") as batch:
        batch.drop_column("replaced_by")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("handled_by")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("sent_by")
        batch.drop_column("upstream_status")
    with op.batch_alter_table("templates") as batch:
        batch.drop_column("rejected_reason")
        batch.drop_column("pending_category")
        batch.drop_column("quality")
