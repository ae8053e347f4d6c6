"""columns written from data of unbounded size become text; outbox.account_id for fair event delivery

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 12:20:00.000000

Encrypted secrets and access tokens are longer than what they hide: a status_callback secret of the
500 characters the API accepts did not fit deliveries.secret_encrypted (500) on PostgreSQL, and every
write that carried it failed. SQLite does not enforce a VARCHAR's length, so only PostgreSQL's columns
change.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = [
    ("deliveries", "secret_encrypted", 500, True),
    ("webhooks", "secret_encrypted", 500, False),
    ("channels", "access_token_encrypted", 2000, False),
]


def upgrade() -> None:
    # The event lane shares its calls between accounts. Rows queued before this have none and are
    # shared as one more account.
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("account_id", sa.Integer(), nullable=True))
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column, length, nullable in COLUMNS:
        op.alter_column(
            table, column, type_=sa.Text(), existing_type=sa.String(length), existing_nullable=nullable
        )


def downgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("account_id")
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column, length, nullable in COLUMNS:
        op.alter_column(
            table, column, type_=sa.String(length), existing_type=sa.Text(), existing_nullable=nullable
        )
