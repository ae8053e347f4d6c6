"""The statuses' one-statement write (messages/webhooks.py `_write_statuses`) on a real database.

It writes only the columns applying a status may change and then takes the messages out of the
session, so a change to any other column would be lost without a word: it must refuse instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from support import store_text_sends
from wagate.db import Database
from wagate.messages.models import Message, MessageStatus
from wagate.messages.webhooks import _write_statuses
from wagate.migrate import migrate


def seed(session: Session) -> str:
    [message_id] = store_text_sends(session, "Statuses Co", ["+994551110003"])
    return message_id


def test_a_status_write_keeps_its_columns_and_refuses_any_other_change(database_url: str) -> None:
    migrate(database_url)
    db = Database(database_url, pool_size=2)

    def deliver(message_id: str, *, also_text: bool) -> Callable[[Session], None]:
        def unit(session: Session) -> None:
            message = session.get_one(Message, message_id)
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
