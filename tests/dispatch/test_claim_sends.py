"""What a send lane's claim takes (sends.claim_sends): its channel's due sends, never another kind's rows.

The claim names a channel's sends by their priority, not by their kind (so that one index serves it
whatever the outbox's statistics say; docs/decisions/0004-outbox-claims.md). Meta's webhook bodies
stored for the channel wait in the same rows of the outbox, named by the same channel: the lane must
leave them to the webhook lane, or it would send a webhook body to Meta as a message.

Here, on the run's database: real sends accepted over HTTP by a gateway with no dispatcher, and a
stored webhook body of their channel, older than they are.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from support.harness import Gateway, new_number
from wagate.core.db import utcnow
from wagate.dispatch.send_claims import claim_sends
from wagate.outbox.models import JobKind, JobState, OutboxJob, Priority, outbox_row


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
    idle_gateway: Gateway, idle_outbox: Session, singles_only: bool
) -> None:
    first = accepted_send(idle_gateway, idle_outbox)
    assert first.channel_id is not None
    webhook = webhook_stored(idle_outbox, first.channel_id)  # due, and before the second send
    second = accepted_send(idle_gateway, idle_outbox)
    idle_outbox.expire_all()

    claimed = claim_sends(
        idle_outbox,
        channel_id=first.channel_id,
        limit=10,
        worker_id="test:1",
        lease_seconds=30,
        singles_only=singles_only,
    )
    idle_outbox.commit()

    assert [c.job_id for c in claimed] == [first.id, second.id]
    assert [c.message_id for c in claimed] == [first.message_id, second.message_id]
    left = idle_outbox.get(OutboxJob, webhook, populate_existing=True)
    assert left is not None
    assert (left.state, left.locked_by, left.attempts) == (JobState.ready, None, 0)
