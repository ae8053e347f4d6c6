"""Admission control of bulk sends: a channel's queue is bounded by time, as WAGATE_BULK_BACKLOG_MAX_SECONDS
says, and what is refused gets 429 `rate_limited` with a Retry-After that means something.

The gateway here allows 2 s of backlog on a channel of 80 messages per second: 160 waiting bulk sends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.app_in_thread import running_gateway
from support.gateway_process import query
from support.harness import ADMIN_TOKEN, Gateway, Simulator, new_number, wait_for

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
RATE = 80
BACKLOG_SECONDS = 2.0
ALLOWED = int(RATE * BACKLOG_SECONDS)


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    with running_gateway(database_url, simulator, bulk_backlog_max_seconds=BACKLOG_SECONDS) as running:
        yield running


def bulk(gateway: Gateway, count: int) -> Any:
    payload = {
        "channel_id": gateway.ids["main"],
        "template": OTP,
        "phone_numbers": [new_number() for _ in range(count)],
    }
    return gateway.http.post(
        gateway.v1("/whatsapp/bulk_messages"), json=payload, headers=gateway.headers(ADMIN_TOKEN)
    )


def stored_messages(gateway: Gateway) -> int:
    return int(query(gateway.database_url, "SELECT count(*) FROM messages")[0][0])


def test_a_batch_larger_than_the_backlog_allows_is_refused_whole(gateway: Gateway) -> None:
    before = stored_messages(gateway)
    response = bulk(gateway, ALLOWED + 1)
    assert response.status_code == 429, response.text
    assert response.json()["error"]["code"] == "rate_limited"
    assert response.headers["Retry-After"] == str(int(BACKLOG_SECONDS))
    assert stored_messages(gateway) == before  # nothing of it was kept


def test_a_full_queue_refuses_the_next_batch_until_it_drains(gateway: Gateway) -> None:
    first = bulk(gateway, ALLOWED - 10)
    assert first.status_code == 202, first.text
    # Moments later at most a few of the first batch's sends are gone: 100 more do not fit.
    refused = bulk(gateway, 100)
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "rate_limited"
    retry_after = int(refused.headers["Retry-After"])
    assert 1 <= retry_after <= 2, retry_after  # (150 + 100 - 160) / 80 at most, rounded up
    # A single send is never refused for a batch's sake.
    otp = gateway.otp(new_number())
    assert otp.status_code == 201, otp.text

    batch_id = first.json()["batch_id"]
    wait_for(
        lambda: (
            gateway.http.get(
                gateway.v1(f"/whatsapp/bulk_messages/{batch_id}"), headers=gateway.headers(ADMIN_TOKEN)
            ).json()["status"]
            == "completed"
        ),
        timeout=15,
        what="the first batch to be handed to Meta",
    )
    again = bulk(gateway, 100)
    assert again.status_code == 202, again.text
