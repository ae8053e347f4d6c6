"""The statuses' one-statement write (messages/meta_statuses.py `_write_statuses`) on a real database.

Applying statuses reads messages as plain records (`MessageRecord`), not ORM objects, and writes
only the columns applying a status may change, so a change to any other column would be lost
without a word: it must refuse instead. A record must also render the same message object (what
every status event carries) as the ORM's message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from support.harness import store_text_sends
from wagate.core.db import Database
from wagate.core.migrate import migrate
from wagate.core.tables import table_of
from wagate.messages.meta_statuses import _write_statuses
from wagate.messages.models import MESSAGE_COLUMNS, Message, MessageRecord, MessageStatus
from wagate.messages.schemas import message_view

_messages = table_of(Message)


def load_record(session: Session, message_id: str) -> MessageRecord:
    columns = [_messages.c[name] for name in MESSAGE_COLUMNS]
    return MessageRecord(
        session.connection().execute(select(*columns).where(_messages.c.id == message_id)).one()
    )


def test_a_record_has_every_column_of_a_message() -> None:
    assert set(MESSAGE_COLUMNS) == {column.name for column in _messages.columns}


def seed(session: Session) -> str:
    [message_id] = store_text_sends(session, "Statuses Co", ["+994551110003"])
    return message_id


def test_a_status_write_keeps_its_columns_and_refuses_any_other_change(database_url: str) -> None:
    migrate(database_url)
    db = Database(database_url, pool_size=2)

    def deliver(message_id: str, *, also_text: bool) -> Callable[[Session], None]:
        def unit(session: Session) -> None:
            message = load_record(session, message_id)
            message.status = MessageStatus.delivered
            message.user_id = "AZ.1"
            if also_text:
                message.text = "changed behind the statement's back"
            _write_statuses(session, [message])

        return unit

    async def scenario() -> None:
        message_id = await db.write(seed)
        with pytest.raises(RuntimeError, match=r"\['text'\]"):
            await db.write(deliver(message_id, also_text=True))
        async with db.read() as session:
            untouched = await session.scalar(select(Message).where(Message.id == message_id))
        assert untouched is not None and untouched.status != MessageStatus.delivered
        assert untouched.text == "hello" and untouched.user_id is None

        await db.write(deliver(message_id, also_text=False))
        async with db.read() as session:
            written = await session.scalar(select(Message).where(Message.id == message_id))
        assert written is not None and written.status == MessageStatus.delivered
        assert written.user_id == "AZ.1" and written.text == "hello"

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(db.dispose())


def test_a_record_renders_the_message_object_as_the_orm_does(database_url: str) -> None:
    migrate(database_url)
    db = Database(database_url, pool_size=2)

    def views(message_id: str) -> Callable[[Session], tuple[dict, dict]]:
        def unit(session: Session) -> tuple[dict, dict]:
            record = load_record(session, message_id)
            orm = session.get_one(Message, message_id)
            return message_view(record, conversation_status="open"), message_view(
                orm, conversation_status="open"
            )

        return unit

    def seed_another(session: Session) -> str:
        [message_id] = store_text_sends(session, "Records Co", ["+994551110004"])
        return message_id

    async def scenario() -> None:
        message_id = await db.write(seed_another)
        from_record, from_orm = await db.write(views(message_id))
        assert from_record == from_orm
        assert from_record["id"] == message_id and from_record["status"] == "sent"

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(db.dispose())
