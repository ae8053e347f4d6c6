"""The delivery job's rules, called directly on a real database: when to retry, when to give up."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from cryptography.fernet import Fernet
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from wagate.accounts.models import Account
from wagate.core.db import Database, utcnow
from wagate.core.migrate import migrate
from wagate.core.security import SecretBox
from wagate.events import deliveries, delivery_claims, repository, service
from wagate.events.http import PostResult
from wagate.events.models import Delivery, DeliveryKind, DeliveryState
from wagate.events.publish import NewDelivery, write_deliveries
from wagate.outbox.models import JobKind, OutboxJob
from wagate.outbox.retry import EVENT_DELIVERY, EVENT_RETRY_WINDOW

NEVER = deliveries.DisablePolicy(after_failures=1_000_000, after_seconds=0)
FAILED = PostResult(status_code=500, latency_ms=3, error="HTTP 500", response=None)


def test_the_first_retry_comes_within_10_s_and_the_second_within_60_s() -> None:
    assert all(EVENT_DELIVERY.delay(1) <= 10 for _ in range(1000))
    assert all(EVENT_DELIVERY.delay(2) <= 60 for _ in range(1000))
    # Growing, and never more than the cap (plus jitter) apart, so 24 hours hold many attempts.
    assert EVENT_DELIVERY.delay(3) > 60 and all(
        EVENT_DELIVERY.delay(n) <= 3 * 3600 * 1.2 for n in range(3, 40)
    )


def test_a_delivery_is_retried_until_it_is_24_hours_old_then_given_up(database_url: str) -> None:
    migrate(database_url)
    db = Database(database_url, pool_size=2)

    def seed(session: Session) -> list[str]:
        account = Account(name="Retry Co")
        session.add(account)
        session.flush()
        box = SecretBox(Fernet.generate_key().decode())
        webhook = repository.create_webhook(
            session,
            account_id=account.id,
            url="https://93.184.215.14/h",
            events=["message_updated"],
            secret=service.new_secret(),
            box=box,
        )
        fresh, old = (
            NewDelivery(
                account.id,
                DeliveryKind.message_updated,
                {"event": "message_updated"},
                f"msg_{n}",
                f"webhook:{webhook.id}:msg_{n}",
                webhook_id=webhook.id,
            )
            for n in ("fresh", "old")
        )
        write_deliveries(session, [fresh, old])
        # The old one has been retried for a day already.
        session.execute(
            update(OutboxJob)
            .where(OutboxJob.payload["delivery_id"].as_string() == old.id)
            .values(created_at=utcnow() - timedelta(seconds=EVENT_RETRY_WINDOW + 1))
        )
        return [fresh.id, old.id]

    async def scenario() -> None:
        fresh_id, old_id = await db.write(seed)
        claimed = await db.write(
            lambda s: delivery_claims.claim_deliveries(s, limit=10, worker_id="test", lease_seconds=60)
        )
        assert {c.id for c in claimed} == {fresh_id, old_id}
        now = utcnow()
        await db.write(
            lambda s: deliveries.record_attempts(
                s,
                [deliveries.Attempted(c, now, FAILED) for c in claimed],
                retry=EVENT_DELIVERY,
                disable=NEVER,
            )
        )
        async with db.read() as session:
            states = dict((await session.execute(select(Delivery.id, Delivery.state))).all())
            jobs = {
                j.payload["delivery_id"]: j
                for j in await session.scalars(
                    select(OutboxJob).where(OutboxJob.kind == JobKind.deliver_event)
                )
            }
        assert states == {fresh_id: DeliveryState.pending, old_id: DeliveryState.failed}
        assert set(jobs) == {fresh_id}  # the given-up one left the outbox
        wait = (jobs[fresh_id].run_at - now).total_seconds()
        assert 0 < wait <= 10 and jobs[fresh_id].last_error == "HTTP 500"

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(db.dispose())
