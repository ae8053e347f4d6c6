"""What a send lane's claim takes (sends.claim_sends): its channel's due sends, never another kind's rows.

The claim names a channel's sends by their priority, not by their kind (so that one index serves it
whatever the outbox's statistics say; docs/performance.md, "Eleventh pass"). Meta's webhook bodies
stored for the channel wait in the same rows of the outbox, named by the same channel: the lane must
leave them to the webhook lane, or it would send a webhook body to Meta as a message.

Here, on the run's database: real sends accepted over HTTP by a gateway with no dispatcher, and a
stored webhook body of their channel, older than they are.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, delete, select
from sqlalchemy.orm import Session

from app_in_thread import gateway_with_app
from support import Gateway, Simulator, new_number
from wagate.db import utcnow
from wagate.dispatch.sends import claim_sends
from wagate.migrate import sync_url
from wagate.outbox.models import JobKind, JobState, OutboxJob, Priority, outbox_row


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    """Accepts and stores sends; sends none (no dispatcher), so each waits for the test's claim."""
    with gateway_with_app(database_url, simulator, run_dispatcher=False) as (running, _):
        yield running


@pytest.fixture
def session(gateway: Gateway) -> Iterator[Session]:
    engine = create_engine(sync_url(gateway.database_url))
    with Session(engine) as session:
        session.execute(
            delete(OutboxJob).where(OutboxJob.kind.in_([JobKind.meta_webhook, JobKind.send_message]))
        )
        session.commit()
        yield session
    engine.dispose()


def accepted_send(gateway: Gateway, session: Session) -> OutboxJob:
    response = gateway.otp(new_number())
    assert response.status_code == 201, response.text
    job = session.scalar(select(OutboxJob).where(OutboxJob.message_id == response.json()["id"]))
    assert job is not None and job.state == JobState.ready
    return job


def webhook_stored(session: Session, channel_id: int) -> int:
    now = utcnow()
    body = {"object": "whatsapp_business_account", "entry": []}
    row = outbox_row(
        JobKind.meta_webhook,
        payload=body,
        run_at=now,
        priority=Priority.background,
        now=now,
        channel_id=channel_id,
    )
    job_id: int = session.execute(OutboxJob.__table__.insert().returning(OutboxJob.id), [row]).scalar_one()
    session.commit()
    return job_id


@pytest.mark.parametrize("singles_only", [False, True], ids=["any-send", "singles-only"])
def test_a_lanes_claim_takes_its_channels_sends_and_leaves_its_stored_webhooks(
    gateway: Gateway, session: Session, singles_only: bool
) -> None:
    first = accepted_send(gateway, session)
    assert first.channel_id is not None
    webhook = webhook_stored(session, first.channel_id)  # due, and before the second send
    second = accepted_send(gateway, session)
    session.expire_all()

    claimed = claim_sends(
        session,
        channel_id=first.channel_id,
        limit=10,
        worker_id="test:1",
        lease_seconds=30,
        singles_only=singles_only,
    )
    session.commit()

    assert [c.job_id for c in claimed] == [first.id, second.id]
    assert [c.message_id for c in claimed] == [first.message_id, second.message_id]
    left = session.get(OutboxJob, webhook, populate_existing=True)
    assert left is not None
    assert (left.state, left.locked_by, left.attempts) == (JobState.ready, None, 0)
