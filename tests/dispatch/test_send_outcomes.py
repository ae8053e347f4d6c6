"""Recording send outcomes on a real database: when a send that cannot reach Meta gives up."""

from __future__ import annotations

import asyncio

from sqlalchemy import select
from sqlalchemy.orm import Session

from support.harness import store_text_sends
from wagate.core.db import Database
from wagate.core.migrate import migrate
from wagate.dispatch import sends
from wagate.messages.models import Message
from wagate.outbox.models import ClaimedSend, OutboxJob
from wagate.outbox.retry import SEND_NOT_DELIVERED


def test_a_send_that_never_reaches_meta_fails_once_its_retries_are_spent(database_url: str) -> None:
    migrate(database_url)
    db = Database(database_url, pool_size=2)

    def seed(session: Session) -> tuple[str, str]:
        spent, young = store_text_sends(session, "Refused Co", ["+994551110001", "+994551110002"])
        return spent, young

    async def scenario() -> None:
        spent, young = await db.write(seed)
        async with db.read() as session:
            jobs = {j.message_id: j for j in await session.scalars(select(OutboxJob))}
        outcomes: list[sends.Outcome] = [
            sends.Retry(
                ClaimedSend(jobs[spent].id, spent, {}, SEND_NOT_DELIVERED.max_attempts, 0),
                "130429: Rate limit hit",
            ),
            sends.Retry(ClaimedSend(jobs[young].id, young, {}, 1, 0), "130429: Rate limit hit"),
        ]
        await db.write(lambda s: sends.record_outcomes(s, outcomes, grace_seconds=60))
        async with db.read() as session:
            messages = {m.id: m for m in await session.scalars(select(Message))}
            left = {j.message_id for j in await session.scalars(select(OutboxJob))}
        assert (
            messages[spent].status == "failed" and messages[spent].external_error == "130429: Rate limit hit"
        )
        assert messages[young].status == "sent" and left == {young}  # tried again later

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(db.dispose())
