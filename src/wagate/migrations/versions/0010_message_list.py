"""the message list: an inbox's, and a number's, messages in (created_at, id) order

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 10:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # GET .../whatsapp/messages and the dashboard's /messages read one range of it per inbox, newest
    # first, and page by (created_at, id) (messages/repository.py, list_sent_messages).
    op.create_index("ix_messages_log", "messages", ["channel_id", "direction", "created_at", "id"])
    # The list filtered by a number, read the same way (a customer has few messages among millions).
    op.create_index("ix_messages_number_log", "messages", ["account_id", "phone_number", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_messages_number_log", table_name="messages")
    op.drop_index("ix_messages_log", table_name="messages")
