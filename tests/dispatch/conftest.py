"""Fixtures of the dispatch tests that shape the outbox by hand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, delete
from sqlalchemy.orm import Session

from support.app_in_thread import gateway_with_app
from support.harness import Gateway, Simulator
from wagate.core.migrate import sync_url
from wagate.outbox.models import JobKind, OutboxJob


@pytest.fixture(scope="module")
def idle_gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    """A gateway that accepts and stores sends and sends none (no dispatcher): each waits in the
    outbox for the test to shape or claim it."""
    with gateway_with_app(database_url, simulator, run_dispatcher=False) as (running, _):
        yield running


@pytest.fixture
def idle_outbox(idle_gateway: Gateway) -> Iterator[Session]:
    """A session on that gateway's database, its outbox cleared of the sends and stored webhook
    bodies an earlier test left."""
    engine = create_engine(sync_url(idle_gateway.database_url))
    try:
        with Session(engine) as session:
            session.execute(
                delete(OutboxJob).where(OutboxJob.kind.in_([JobKind.send_message, JobKind.meta_webhook]))
            )
            session.commit()
            yield session
    finally:
        engine.dispose()
