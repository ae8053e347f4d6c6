"""Recording Meta's answer to a send on a real database (both, each with its own statements): a send Meta
holds for a quality check keeps `held_for_quality_assessment` (API.md section 14), unless a status
webhook already moved the message on; an accepted send has none."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from support.harness import store_text_sends
from wagate.core.db import Database, utcnow
from wagate.core.migrate import migrate
from wagate.dispatch import sends
from wagate.messages.models import Message, ParkedStatus
from wagate.outbox.models import ClaimedSend, OutboxJob

HELD = "held_for_quality_assessment"


def test_a_held_answer_is_kept_until_a_status_moves_the_message_on(database_url: str) -> None:
    migrate(database_url)
    db = Database(database_url, pool_size=2)
    numbers = ["+994551120001", "+994551120002", "+994551120003", "+994551120004"]

    def seed(session: Session) -> list[str]:
        held, accepted, status_first, parked_first = store_text_sends(session, "Paced Co", numbers)
        # A status webhook found this one by our id before Meta's answer came: it has its wamid.
        session.execute(
            update(Message).where(Message.id == status_first).values(upstream_message_id="wamid.S")
        )
        # This one's `sent` status came before the answer too, and waits (parked) for the wamid.
        channel_id = session.scalar(select(Message.channel_id).where(Message.id == parked_first))
        status = {"id": "wamid.P", "status": "sent", "timestamp": str(int(time.time()))}
        session.add(
            ParkedStatus(
                upstream_message_id="wamid.P", channel_id=channel_id, payload=status, received_at=utcnow()
            )
        )
        return [held, accepted, status_first, parked_first]

    async def scenario() -> None:
        held, accepted, status_first, parked_first = await db.write(seed)
        async with db.read() as session:
            jobs = {j.message_id: j.id for j in await session.scalars(select(OutboxJob))}

        def claimed(message_id: str) -> ClaimedSend:
            return ClaimedSend(jobs[message_id], message_id, {}, 1, 0)

        outcomes: list[sends.Outcome] = [
            sends.Sent(claimed(held), "wamid.H", HELD),
            sends.Sent(claimed(accepted), "wamid.A"),
            sends.Sent(claimed(status_first), "wamid.S", HELD),
            sends.Sent(claimed(parked_first), "wamid.P", HELD),
        ]
        await db.write(lambda s: sends.record_outcomes(s, outcomes, grace_seconds=60))
        async with db.read() as session:
            found = {m.id: m for m in await session.scalars(select(Message))}
            left = list(await session.scalars(select(OutboxJob.id)))
        assert {m: (found[m].upstream_message_id, found[m].upstream_status) for m in found} == {
            held: ("wamid.H", HELD),
            accepted: ("wamid.A", None),
            status_first: ("wamid.S", None),
            parked_first: ("wamid.P", None),
        }
        assert all(found[m].status == "sent" for m in found)  # held is not failed
        assert left == []  # and nothing is sent again

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(db.dispose())
