"""A channel Meta refuses (its access token, error 190) pauses instead of failing its messages one by
one (issue 12, point 4): the sends wait, uncounted, the dashboard shows a health banner on every page,
and a probe send resumes the channel once Meta takes sends again. Both databases."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from support.app_in_thread import running_gateway, sql
from support.harness import MAIN, Gateway, Simulator, new_number, signed_in, wait_for


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    with running_gateway(database_url, simulator, channel_probe_seconds=0.5) as running:
        yield running


def test_a_refused_token_pauses_the_channel_and_a_probe_resumes_it(gateway: Gateway) -> None:
    gateway.sim.configure(access_tokens=["a-token-no-channel-has"])
    try:
        first, second = new_number(), new_number()
        waiting = [gateway.otp(first).json()["id"], gateway.otp(second).json()["id"]]
        wait_for(
            lambda: sql(
                gateway.database_url,
                "SELECT paused_reason FROM channels WHERE id = :c",
                c=gateway.ids["main"],
            )[0][0],
            what="the channel to be paused",
        )
        [(reason,)] = sql(
            gateway.database_url, "SELECT paused_reason FROM channels WHERE id = :c", c=gateway.ids["main"]
        )
        assert reason.startswith("190:")
        time.sleep(2.0)  # several probes were refused meanwhile
        for message_id in waiting:
            message = gateway.message(message_id)
            assert (
                message["status"] == "sent" and message["upstream_message_id"] is None
            )  # waiting, not failed
        with signed_in(gateway) as browser_like:
            page = browser_like.get("/conversations").text
            assert f'data-channel-health="{gateway.ids["main"]}"' in page and "is paused" in page
        # Refusals of the channel are not the message's attempts: nothing is used up while it waits.
        attempts = sql(
            gateway.database_url,
            "SELECT attempts FROM outbox WHERE channel_id = :c AND kind = 'send_message'",
            c=gateway.ids["main"],
        )
        assert all(count <= 1 for (count,) in attempts)
    finally:
        gateway.sim.configure(access_tokens=None)
    for message_id in waiting:
        gateway.wait_status(message_id, "delivered")
    wait_for(
        lambda: (
            sql(
                gateway.database_url,
                "SELECT paused_reason FROM channels WHERE id = :c",
                c=gateway.ids["main"],
            )[0][0]
            is None
        ),
        what="the channel to resume",
    )
    with signed_in(gateway) as browser_like:
        assert "data-channel-health" not in browser_like.get("/conversations").text
    # At its rate again: a new OTP goes at once.
    gateway.wait_status(gateway.otp(new_number()).json()["id"], "delivered")


def test_sends_refused_in_a_row_for_no_reason_of_theirs_pause_the_channel(gateway: Gateway) -> None:
    # 131000 ("something went wrong") names no cause in the message; twelve in a row.
    gateway.sim.configure(fail_next={"count": 12, "code": 131000, "phone_number_id": MAIN["phone_number_id"]})
    ids = []
    for _ in range(14):
        ids.append(gateway.otp(new_number()).json()["id"])
        time.sleep(0.05)  # one after the other, as they are refused
    finals = [
        wait_for(
            lambda m=m: (msg := gateway.message(m))["status"] in ("failed", "delivered") and msg,
            timeout=20,
            what="the sends to settle",
        )
        for m in ids
    ]
    failed = [m for m in finals if m["status"] == "failed"]
    # Nine failed one by one; from the tenth on they waited for the channel, and went once Meta took sends.
    assert len(failed) == 9 and all(m["external_error"].startswith("131000") for m in failed)
    assert sum(m["status"] == "delivered" for m in finals) == 5
    assert sql(
        gateway.database_url, "SELECT paused_reason FROM channels WHERE id = :c", c=gateway.ids["main"]
    ) == [(None,)]
