"""Migration 0008 (API.md section 13, customers by user id) carries every existing row over, on both
databases: contacts keep their numbers, conversations their windows, messages their numbers and costs.
And the schema the migrations build is the one the models describe (nothing missing, nothing extra)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.pool import NullPool

from wagate.core.migrate import alembic_config, sync_url
from wagate.ops.schema import Base

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GIVEN: dict[str, dict[str, Any]] = {
    "accounts": {"id": 1, "name": "Acme"},
    "channels": {"id": 1, "account_id": 1, "phone_number_id": "106540352242922"},
    "contacts": {"id": 1, "account_id": 1, "phone_number": "+994501234567", "name": "Aysel"},
    "conversations": {
        "id": 1,
        "account_id": 1,
        "channel_id": 1,
        "contact_id": 1,
        "status": "resolved",
        "last_customer_message_at": NOW,
    },
    "messages": {
        "id": "msg_old",
        "account_id": 1,
        "channel_id": 1,
        "conversation_id": 1,
        "direction": "outbound",
        "phone_number": "+994501234567",
        "status": "delivered",
        "cost_micros": 36_000,
        "cost_currency": "AZN",
        "template_category": "AUTHENTICATION",
    },
}


def _filler(column: sa.Column[Any]) -> Any:
    """A value for a required column the test does not care about."""
    kind = column.type
    if isinstance(kind, sa.Boolean):
        return False
    if isinstance(kind, sa.Integer):
        return 1
    if isinstance(kind, sa.DateTime):
        return NOW
    if isinstance(kind, sa.JSON):
        return []
    return "x"


def _insert_rows(connection: sa.Connection) -> None:
    metadata = sa.MetaData()
    metadata.reflect(connection, only=list(GIVEN))
    for name, given in GIVEN.items():
        table = metadata.tables[name]
        row = {
            column.name: _filler(column)
            for column in table.columns
            if not column.nullable and column.server_default is None and column.name not in given
        }
        connection.execute(table.insert().values(**row, **given))


def test_0008_keeps_every_row_and_the_models_match_the_schema(database_url: str) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0007")
    engine = sa.create_engine(sync_url(database_url), poolclass=NullPool)
    try:
        with engine.begin() as connection:
            _insert_rows(connection)
        command.upgrade(config, "head")
        with engine.begin() as connection:
            contact = connection.execute(sa.text("SELECT phone_number, name, username FROM contacts")).one()
            assert tuple(contact) == ("+994501234567", "Aysel", None)
            conversation = connection.execute(
                sa.text("SELECT contact_id, status, last_customer_message_at FROM conversations")
            ).one()
            assert conversation[:2] == (1, "resolved") and conversation[2] is not None
            message = connection.execute(
                sa.text(
                    "SELECT phone_number, user_id, cost_micros, cost_category, conversation_id FROM messages"
                )
            ).one()
            assert tuple(message) == ("+994501234567", None, 36_000, None, 1)
            # A customer known by user id alone can now be stored.
            connection.execute(
                sa.text("INSERT INTO contacts (id, account_id, created_at) VALUES (2, 1, :at)"), {"at": NOW}
            )
            # SQLite keeps the declared lengths of columns 0007 made unbounded (it enforces none):
            # types are compared on PostgreSQL only.
            postgres = connection.dialect.name == "postgresql"
            context = MigrationContext.configure(connection, opts={"compare_type": postgres})
            differences = compare_metadata(context, Base.metadata)
            assert differences == []
    finally:
        engine.dispose()
