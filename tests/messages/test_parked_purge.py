"""A Meta status for a wamid we do not know is parked until its send result names that wamid; one that
no send of ours ever claims (another tool on the same number, a send from before a restore) is
forgotten after a day by the hourly purge, so the table does not grow forever."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from datetime import timedelta

import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import NullPool, create_engine, update

from support.app_in_thread import gateway_with_app, sql
from support.harness import APP_SECRET, MAIN, Gateway, Simulator, new_number, wait_for
from wagate.core.db import utcnow
from wagate.core.migrate import sync_url
from wagate.messages.models import ParkedStatus
from wagate.outbox.models import JobKind, OutboxJob
from wagate.whatsapp.signature import sign


@pytest.fixture(scope="module")
def app_gateway(database_url: str, simulator: Simulator) -> Iterator[tuple[Gateway, FastAPI]]:
    with gateway_with_app(database_url, simulator) as running:
        yield running


def post_status(gateway: Gateway, wamid: str) -> None:
    """Meta's signed webhook: `wamid`, sent from our Main number, was delivered."""
    value = {
        "messaging_product": "whatsapp",
        "metadata": {
            "display_phone_number": MAIN["display_phone_number"],
            "phone_number_id": MAIN["phone_number_id"],
        },
        "statuses": [
            {
                "id": wamid,
                "status": "delivered",
                "timestamp": str(int(time.time())),
                "recipient_id": new_number()[1:],
            }
        ],
    }
    body = {
        "object": "whatsapp_business_account",
        "entry": [{"id": MAIN["waba_id"], "changes": [{"field": "messages", "value": value}]}],
    }
    raw = orjson.dumps(body)
    response = gateway.http.post(
        f"{gateway.url}/webhooks/whatsapp",
        content=raw,
        headers={"X-Hub-Signature-256": sign(APP_SECRET, raw), "Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text


def parked(gateway: Gateway, wamid: str) -> bool:
    query = "SELECT count(*) FROM parked_statuses WHERE upstream_message_id = :wamid"
    return bool(sql(gateway.database_url, query, wamid=wamid)[0][0])


def test_a_status_nobody_claims_is_forgotten_after_a_day(app_gateway: tuple[Gateway, FastAPI]) -> None:
    gateway, _ = app_gateway
    old, recent = (f"wamid.unknown-{secrets.token_hex(8)}" for _ in range(2))
    for wamid in (old, recent):
        post_status(gateway, wamid)
    wait_for(lambda: parked(gateway, old) and parked(gateway, recent), what="both statuses parked")

    # A day goes by for the first one; then the hourly purge comes due.
    engine = create_engine(sync_url(gateway.database_url), poolclass=NullPool)
    try:
        with engine.begin() as connection:
            connection.execute(
                update(ParkedStatus)
                .where(ParkedStatus.upstream_message_id == old)
                .values(received_at=utcnow() - timedelta(days=1, minutes=1))
            )
            connection.execute(
                update(OutboxJob)
                .where(OutboxJob.kind == JobKind.purge_expired)
                .values(run_at=utcnow() - timedelta(seconds=1), locked_until=None)
            )
    finally:
        engine.dispose()

    wait_for(lambda: not parked(gateway, old), timeout=15, what="the day-old parked status purged")
    assert parked(gateway, recent), "a status parked moments ago was purged with it"
