"""Which stored Meta webhooks hold an orphaned send back (unsettled.release_unconfirmed).

A send claimed by a worker that died is `in_flight` with its lease run out. Before it is sent again,
the dispatcher waits for any stored webhook that may hold its status: Meta's statuses come within the
grace period, which the lease includes, so only a webhook stored before the lease ran out, or before
the receiving side had caught up with Meta's retries, can. A webhook stored later cannot, and under
steady load one always waits: holding the send back for it kept a dead worker's sends until the load
ended (the scale-out test: a 10 s pause, fixed in a41ccc9). Sent again with a webhook of its own
still waiting, Meta would get it twice.

Here, on the run's database: a real send accepted over HTTP by a gateway with no dispatcher, turned
into a dead worker's claim, and one stored webhook at a chosen moment.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from support.harness import Gateway, new_number
from wagate.core.db import utcnow
from wagate.dispatch.unsettled import release_unconfirmed
from wagate.outbox.models import JobKind, JobState, OutboxJob, Priority, outbox_row

LEASE_RAN_OUT = timedelta(seconds=10)  # ago


def orphaned_send(gateway: Gateway, session: Session, now: datetime) -> int:
    """An accepted send, claimed by a worker that is gone: `in_flight`, its lease run out."""
    response = gateway.otp(new_number())
    assert response.status_code == 201, response.text
    job_id = session.scalar(select(OutboxJob.id).where(OutboxJob.message_id == response.json()["id"]))
    assert job_id is not None
    session.execute(
        update(OutboxJob)
        .where(OutboxJob.id == job_id)
        .values(state=JobState.in_flight, attempts=1, locked_by="gone:1", locked_until=now - LEASE_RAN_OUT)
    )
    session.commit()
    return job_id


def webhook_stored(session: Session, at: datetime) -> None:
    body = {"object": "whatsapp_business_account", "entry": []}
    row = outbox_row(JobKind.meta_webhook, payload=body, run_at=at, priority=Priority.background, now=at)
    session.execute(OutboxJob.__table__.insert(), [row])
    session.commit()


@pytest.mark.parametrize(
    ("stored_ago", "caught_up_ago", "held"),
    [
        (None, 60, False),  # nothing waits: sent again
        (20, 60, True),  # stored before the lease ran out: it may hold the send's status
        (5, 60, False),  # stored after the lease and after the catch-up: a later message's
        (5, 1, True),  # stored after the lease, but before the receiving side caught up
        (20, None, True),  # the receiving side not up a whole grace period: nothing is judged by it
    ],
    ids=["none", "before-lease", "after-both", "before-catch-up", "not-caught-up"],
)
def test_only_a_webhook_that_may_hold_its_status_holds_an_orphaned_send_back(
    idle_gateway: Gateway,
    idle_outbox: Session,
    stored_ago: int | None,
    caught_up_ago: int | None,
    held: bool,
) -> None:
    now = utcnow()
    job_id = orphaned_send(idle_gateway, idle_outbox, now)
    if stored_ago is not None:
        webhook_stored(idle_outbox, now - timedelta(seconds=stored_ago))
    caught_up = None if caught_up_ago is None else now - timedelta(seconds=caught_up_ago)

    release_unconfirmed(idle_outbox, [job_id], webhooks_before=utcnow(), caught_up=caught_up)
    idle_outbox.commit()

    job = idle_outbox.get(OutboxJob, job_id)
    assert job is not None
    if held:
        assert job.state is JobState.in_flight  # looked at again on the next round
        assert job.locked_by == "gone:1"
    else:
        assert job.state is JobState.ready  # sent again (it never reached Meta)
        assert job.locked_by is None
