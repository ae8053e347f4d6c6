"""API.md: an Idempotency-Key is kept for a limited time (24 hours by default), then a repeat is new."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from support.app_in_thread import running_gateway
from support.harness import Gateway, Simulator, new_number, wait_for

# Long enough for the repeat to come within it on a loaded machine (the test suite in parallel).
TTL = 3


@pytest.fixture(scope="module")
def short_memory(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    with running_gateway(database_url, simulator, idempotency_ttl_seconds=TTL) as gateway:
        yield gateway


def test_a_key_is_forgotten_after_its_time(short_memory: Gateway) -> None:
    number = new_number()
    body = {"phone_number": number, "template": {"name": "otp_code", "language": "en", "parameters": ["5"]}}
    sent_at = time.monotonic()
    first = short_memory.send(body, **{"Idempotency-Key": "expiring"})
    assert short_memory.send(body, **{"Idempotency-Key": "expiring"}).json() == first.json()
    time.sleep(max(0.0, TTL + 0.2 - (time.monotonic() - sent_at)))
    later = short_memory.send(body, **{"Idempotency-Key": "expiring"})
    assert later.status_code == 201 and later.json()["id"] != first.json()["id"]
    wait_for(lambda: len(short_memory.sim.messages(to=number)) == 2, what="both sends upstream")
