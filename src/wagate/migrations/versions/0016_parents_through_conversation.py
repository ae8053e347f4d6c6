"""a message's account and channel, and a conversation's account, are checked through its parents

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27 17:50:00.000000

Every accepted send inserts a message and, for a new customer, a contact and a conversation, and
PostgreSQL checks each foreign key of each row with a query of its own (a locking read of the parent
row). Seven checks a send, three of them redundant: a message's conversation (a required column,
checked) belongs to the same account and channel, and a conversation's channel (checked) to the same
account. Those three went: on this machine's PostgreSQL the statement that stores 40 sends took
6.1-7.0 ms instead of 7.7-8.2 ms (docs/decisions/0004-outbox-claims.md). Deleting an account or a
channel still deletes its messages and conversations, through the same ON DELETE CASCADE chain
(account -> channels and contacts -> conversations -> messages).

On SQLite the two tables are copied (SQLite cannot drop a constraint): a one-off cost of the
upgrade, about as long as copying the messages.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, constraint, column, parent)
_DROPPED = [
    ("messages", "fk_messages_account_id_accounts", "account_id", "accounts"),
    ("messages", "fk_messages_channel_id_channels", "channel_id", "channels"),
    ("conversations", "fk_conversations_account_id_accounts", "account_id", "accounts"),
]


def upgrade() -> None:
    for table in ("messages", "conversations"):
        with op.batch_alter_table(table) as batch:
            for of_table, name, _column, _parent in _DROPPED:
                if of_table == table:
                    batch.drop_constraint(name, type_="foreignkey")


def downgrade() -> None:
    for table in ("messages", "conversations"):
        with op.batch_alter_table(table) as batch:
            for of_table, name, column, parent in _DROPPED:
                if of_table == table:
                    batch.create_foreign_key(name, parent, [column], ["id"], ondelete="CASCADE")
