"""Meta's webhook bodies are applied by the process that sends for their channel.

Status updates of a channel's messages and that channel's own send outcomes write the same `messages`
rows. When any worker applied any body, two processes wrote those rows in different orders and
deadlocked; PostgreSQL takes a second (`deadlock_timeout`) to say so, and for that second the
processes' writes, their claims included, stood still (the scale-out test: 1 s gaps in a channel's
sends and 82 % of its rate after a takeover). So the receiver stores each body with its channel, a
dispatcher claims only the bodies of the channels it holds (and those of no single channel), and a
process that takes a channel frees the bodies a gone owner had claimed, so they are applied now, not
after their lease.

Here: what the receiver stores (over HTTP, on a gateway without a dispatcher, so the row stays to be
read), and which bodies a claim takes, on the database of the run (PostgreSQL in CI).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session
from test_receiver import post_signed, status, status_webhook

from support.app_in_thread import gateway_with_app, sql
from support.harness import MAIN, Gateway, Simulator
from wagate.core.db import utcnow
from wagate.core.migrate import migrate, sync_url
from wagate.dispatch.jobs import WEBHOOK_LEASE_SECONDS, claim_jobs
from wagate.dispatch.webhook_jobs import take_over_webhooks
from wagate.outbox.models import JobKind, OutboxJob, Priority, outbox_row

ME = "host:1"
GONE = "host:2"  # a worker that died with bodies claimed


@pytest.fixture
def receiver_only(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    """An API process that stores Meta's webhooks and applies none (`serve --no-dispatcher`)."""
    with gateway_with_app(database_url, simulator, run_dispatcher=False) as (gateway, _):
        yield gateway


def stored_bodies(database_url: str) -> list[tuple[Any, ...]]:
    return sql(database_url, "SELECT channel_id, payload FROM outbox WHERE kind = 'meta_webhook' ORDER BY id")


def test_the_receiver_stores_a_body_with_the_channel_of_its_phone_number(receiver_only: Gateway) -> None:
    gateway = receiver_only
    [(main_channel,)] = sql(
        gateway.database_url,
        "SELECT id FROM channels WHERE phone_number_id = :number",
        number=MAIN["phone_number_id"],
    )
    ours = status_webhook(status("wamid.routing-1", "delivered", 1_700_000_000, "15550002222"))
    unknown = status_webhook(status("wamid.routing-2", "delivered", 1_700_000_001, "15550002222"))
    unknown["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"] = "999000999000"
    both = status_webhook(status("wamid.routing-3", "read", 1_700_000_002, "15550002222"))
    both["entry"].append(unknown["entry"][0])  # one body about two numbers
    for body in (ours, unknown, both):
        assert post_signed(gateway, body).status_code == 200

    stored = stored_bodies(gateway.database_url)
    assert [channel for channel, _ in stored] == [main_channel, None, None]


def body_row(channel_id: int | None, claimed_by: str | None = None) -> dict[str, Any]:
    now = utcnow()
    row = outbox_row(
        JobKind.meta_webhook,
        payload={"object": "whatsapp_business_account", "entry": []},
        run_at=now,
        priority=Priority.background,
        now=now,
        channel_id=channel_id,
    )
    if claimed_by is not None:
        row |= {"locked_by": claimed_by, "locked_until": now + timedelta(seconds=WEBHOOK_LEASE_SECONDS)}
    return row


@pytest.fixture
def session(database_url: str) -> Iterator[Session]:
    """A transaction on the run's database, rolled back afterwards."""
    migrate(database_url)
    engine = create_engine(sync_url(database_url))
    with Session(engine) as session:
        session.execute(OutboxJob.__table__.delete().where(OutboxJob.kind == JobKind.meta_webhook))
        yield session
        session.rollback()
    engine.dispose()


def claimed_channels(session: Session, channels: set[int] | None) -> list[int | None]:
    claimed = claim_jobs(session, kind=JobKind.meta_webhook, limit=100, worker_id=ME, channels=channels)
    by_id = {row.id: row.channel_id for row in session.execute(select(OutboxJob.id, OutboxJob.channel_id))}
    return sorted((by_id[job.id] for job in claimed), key=lambda c: -1 if c is None else c)


def test_a_dispatcher_claims_the_bodies_of_its_channels_and_of_none(session: Session) -> None:
    session.execute(OutboxJob.__table__.insert(), [body_row(7), body_row(8), body_row(None), body_row(7)])
    assert claimed_channels(session, {8}) == [None, 8]
    assert claimed_channels(session, {9}) == []  # none left that is its to apply
    assert claimed_channels(session, {7, 9}) == [7, 7]


def test_the_only_dispatcher_claims_every_body(session: Session) -> None:
    """SQLite runs one dispatcher: it holds every channel, asked for or not (channels=None)."""
    session.execute(OutboxJob.__table__.insert(), [body_row(7), body_row(None), body_row(8)])
    assert claimed_channels(session, None) == [None, 7, 8]


def test_taking_a_channel_frees_the_bodies_a_gone_owner_claimed(session: Session) -> None:
    session.execute(
        OutboxJob.__table__.insert(), [body_row(7, claimed_by=GONE), body_row(8, claimed_by=GONE)]
    )
    assert claimed_channels(session, {7, 8}) == []  # their lease still runs
    take_over_webhooks(session, [7], ME)
    assert claimed_channels(session, {7, 8}) == [7]  # channel 8's body is still the other's
