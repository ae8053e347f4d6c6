"""The conversation list on a busy day (issue 46): last message, waiting since, search keys

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 03:30:00.000000

- conversations: the last message as the list shows it (preview, its folded form for search, who
  wrote it, the template's name, the agent) and since when the customer waits for an answer, kept
  where messages are written so that the list stays one query a page; an index of the waiting ones
  ("Needs reply", longest waiting first);
- contacts: name and username folded for search (conversations/search.py).

No trigram index (pg_trgm): a search reads the contact's key and the conversation's, two tables, which
an OR across a join cannot serve from two indexes; at 100,000 conversations a search reads every row
in tens of milliseconds (bench/conversation_search.py, docs/dashboard.md).

Existing rows are filled from the messages in batches: the folding is Python's, so the keys cannot
be computed by SQL alone; waiting since is one set-based statement.
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from wagate.conversations.last_message import LAST_MESSAGE_COLUMNS, LastMessage, written_by
from wagate.conversations.search import contact_key
from wagate.core.tables import UTCDateTime

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 1000


def upgrade() -> None:
    with op.batch_alter_table("contacts") as batch:
        batch.add_column(sa.Column("search_key", sa.String(400), nullable=True))
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("last_message_text", sa.String(200), nullable=True))
        batch.add_column(sa.Column("last_message_key", sa.String(250), nullable=True))
        batch.add_column(sa.Column("last_message_from", sa.String(30), nullable=True))
        batch.add_column(sa.Column("last_message_author", sa.String(512), nullable=True))
        batch.add_column(sa.Column("last_message_agent_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("waiting_since", UTCDateTime(timezone=True), nullable=True))
    connection = op.get_bind()
    _fill_contact_keys(connection)
    _fill_last_messages(connection)
    _fill_waiting_since(connection)
    op.create_index(
        "ix_conversations_waiting",
        "conversations",
        ["account_id", "waiting_since", "id"],
        sqlite_where=sa.text("waiting_since IS NOT NULL"),
        postgresql_where=sa.text("waiting_since IS NOT NULL"),
    )


def _fill_contact_keys(connection: sa.Connection) -> None:
    after = 0
    while True:
        rows = connection.execute(
            sa.text(
                "SELECT id, name, username FROM contacts WHERE id > :after"
                " AND (name IS NOT NULL OR username IS NOT NULL) ORDER BY id LIMIT :batch"
            ),
            {"after": after, "batch": BATCH},
        ).all()
        if not rows:
            return
        connection.execute(
            sa.text("UPDATE contacts SET search_key = :key WHERE id = :id"),
            [{"id": row.id, "key": contact_key(row.name, row.username)} for row in rows],
        )
        after = rows[-1].id


_LAST_OF = sa.text(
    "SELECT conversation_id, direction, sent_as, text, template_name, agent_user_id, sent_by FROM ("
    " SELECT m.conversation_id, m.direction, m.sent_as, m.text, m.template_name, m.agent_user_id,"
    " m.sent_by, ROW_NUMBER() OVER (PARTITION BY m.conversation_id ORDER BY m.created_at DESC, m.id DESC)"
    " AS n FROM messages m WHERE m.conversation_id IN :ids AND m.direction <> 'system') latest"
    " WHERE n = 1"
).bindparams(sa.bindparam("ids", expanding=True))


_conversations = sa.table("conversations", sa.column("id"), *(sa.column(c) for c in LAST_MESSAGE_COLUMNS))
_SET_LAST = (
    _conversations.update()
    .where(_conversations.c.id == sa.bindparam("conversation_id"))
    .values({column: sa.bindparam(column) for column in LAST_MESSAGE_COLUMNS})
)


def _fill_last_messages(connection: sa.Connection) -> None:
    after = 0
    while True:
        ids = list(
            connection.execute(
                sa.text("SELECT id FROM conversations WHERE id > :after ORDER BY id LIMIT :batch"),
                {"after": after, "batch": BATCH},
            ).scalars()
        )
        if not ids:
            return
        updates: list[dict[str, Any]] = []
        for row in connection.execute(_LAST_OF, {"ids": ids}):
            template = row.template_name is not None and row.sent_as == "template"
            last = LastMessage(
                written_by(
                    inbound=row.direction == "inbound",
                    template=template,
                    agent_user_id=row.agent_user_id,
                    sent_by=row.sent_by,
                ),
                text=None if template else row.text,
                template_name=row.template_name if template else None,
                agent_user_id=row.agent_user_id,
            )
            updates.append({"conversation_id": row.conversation_id, **last.columns()})
        if updates:
            connection.execute(_SET_LAST, updates)
        after = ids[-1]


def _fill_waiting_since(connection: sa.Connection) -> None:
    """The customer's first message that no reply came after (as ENDS_WAITING in
    conversations/last_message.py decides: an agent's, Meta's AI agent's or a free-form API
    message). One statement; the messages of each conversation are read by their conversation_id index."""
    connection.execute(
        sa.text(
            "UPDATE conversations SET waiting_since = ("
            " SELECT min(i.created_at) FROM messages i"
            " WHERE i.conversation_id = conversations.id AND i.direction = 'inbound'"
            " AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.conversation_id = i.conversation_id"
            " AND r.direction = 'outbound' AND r.created_at >= i.created_at"
            " AND (r.agent_user_id IS NOT NULL OR r.sent_by IS NOT NULL OR r.sent_as = 'session')))"
        )
    )


def downgrade() -> None:
    op.drop_index("ix_conversations_waiting", table_name="conversations")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("waiting_since")
        batch.drop_column("last_message_agent_id")
        batch.drop_column("last_message_author")
        batch.drop_column("last_message_from")
        batch.drop_column("last_message_key")
        batch.drop_column("last_message_text")
    with op.batch_alter_table("contacts") as batch:
        batch.drop_column("search_key")
