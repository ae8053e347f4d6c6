"""API.md section 11, validity period: a send not handed to Meta within `validity_seconds` of its
acceptance is never sent; it fails `expired: ...`, costs 0 and fires its events like any failure."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.fernet import Fernet

from support.app_in_thread import gateway_with_app, running_gateway
from support.harness import Gateway, Simulator, new_number, wait_for
from support.receiver import Receiver

# One key for every gateway of the module: they share the module's database (each test starts its
# own, so no other gateway's dispatcher sends what a test means to keep waiting).
KEY = Fernet.generate_key().decode()
SETTINGS = {"allow_private_urls": True}
OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.stop()


def bulk(gateway: Gateway, body: dict[str, Any]) -> Any:
    payload = {"channel_id": gateway.ids["main"], "template": OTP, **body}
    return gateway.http.post(gateway.v1("/whatsapp/bulk_messages"), json=payload, headers=gateway.headers())


def accepted(response: Any) -> str:
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    return message_id


def sent_ids(gateway: Gateway) -> set[str]:
    """Our message ids of every send the simulator accepted."""
    return {m.get("biz_opaque_callback_data") for m in gateway.sim.messages()} - {None}


def assert_expired(message: dict[str, Any], seconds: int) -> None:
    assert message["status"] == "failed"
    assert message["external_error"] == (
        f"expired: not handed to WhatsApp within {seconds} s of its acceptance"
    )
    assert message["upstream_message_id"] is None
    assert message["cost"]["amount"] == "0"


def test_validity_is_1_to_86400_seconds(database_url: str, simulator: Simulator) -> None:
    with running_gateway(database_url, simulator, secret_key=KEY, **SETTINGS) as gateway:
        for wrong in (0, 86401, "x", -5, 2.5):
            single = gateway.otp(new_number(), validity_seconds=wrong)
            assert single.status_code == 422, (wrong, single.text)
            assert "validity_seconds" in single.text
            batch = bulk(gateway, {"phone_numbers": [new_number()], "validity_seconds": wrong})
            assert batch.status_code == 422, (wrong, batch.text)
            assert "validity_seconds" in batch.text
        for right in (1, 86400):
            assert gateway.otp(new_number(), validity_seconds=right).status_code == 201
        fresh = accepted(gateway.otp(new_number(), validity_seconds=60))
        gateway.wait_status(fresh, "delivered")


def test_a_throttled_channel_never_sends_an_otp_past_its_validity(
    database_url: str, simulator: Simulator
) -> None:
    # Meta takes one send a second from the channel and answers 130429 beyond: the channel is
    # throttled, its pause grows with each refusal, and OTPs of 2 s wait past their validity.
    with running_gateway(database_url, simulator, secret_key=KEY, **SETTINGS) as gateway:
        first = accepted(gateway.otp(new_number(), validity_seconds=2))
        wait_for(lambda: first in sent_ids(gateway), what="the first OTP at Meta")
        # Meta's window now holds that one: the next OTPs are refused until a second has passed.
        simulator.configure(rate_limit_per_second=1)
        try:
            ids = [first, *(accepted(gateway.otp(new_number(), validity_seconds=2)) for _ in range(3))]

            def settled() -> list[dict[str, Any]] | None:
                messages = [gateway.message(i) for i in ids]
                done = all(m["status"] in ("delivered", "failed") for m in messages)
                return messages if done else None

            messages = wait_for(settled, timeout=30, what="every OTP delivered or expired")
        finally:
            simulator.configure(rate_limit_per_second=None)
        sent = sent_ids(gateway)
        expired = [m for m in messages if m["status"] == "failed"]
        delivered = [m for m in messages if m["status"] == "delivered"]
        # At most one a second reaches Meta: 2 s after acceptance, at least one is still waiting.
        assert expired and delivered
        for message in expired:
            assert_expired(message, 2)
            assert message["id"] not in sent  # never reached the simulator
        for message in delivered:
            assert message["id"] in sent
            assert message["cost"]["amount"] != "0"


def test_a_restart_after_an_outage_sends_no_stale_otp(
    database_url: str, simulator: Simulator, receiver: Receiver
) -> None:
    callback = {"url": receiver.url("callback"), "on_change": True}
    # A gateway whose dispatcher is not running: what it accepts waits, as in an outage.
    with gateway_with_app(
        database_url, simulator, secret_key=KEY, run_dispatcher=False, wire_simulator=True, **SETTINGS
    ) as (down, _):
        stale = [
            accepted(down.otp(new_number(), validity_seconds=2, status_callback=callback)),
            accepted(down.otp(new_number(), validity_seconds=2)),
        ]
        lasting = accepted(down.otp(new_number(), validity_seconds=600))
        unlimited = accepted(down.otp(new_number()))
        batch = bulk(down, {"phone_numbers": [new_number(), new_number()], "validity_seconds": 2})
        assert batch.status_code == 202, batch.text
        batch_id = batch.json()["batch_id"]
        time.sleep(5)  # the outage: 5 s of downtime

    with running_gateway(database_url, simulator, secret_key=KEY, **SETTINGS) as gateway:
        gateway.wait_status(lasting, "delivered")
        gateway.wait_status(unlimited, "delivered")
        for message_id in stale:
            assert_expired(gateway.wait_status(message_id, "failed"), 2)

        def completed() -> dict[str, Any] | None:
            response = gateway.http.get(
                gateway.v1(f"/whatsapp/bulk_messages/{batch_id}"), headers=gateway.headers()
            )
            view: dict[str, Any] = response.json()
            return view if view["status"] == "completed" else None

        view = wait_for(completed, timeout=15, what=f"batch {batch_id} completed")
        assert view["counts"]["failed"] == 2 and view["counts"]["delivered"] == 0
        for recipient in view["recipients"]:
            assert_expired(gateway.message(recipient["message_id"]), 2)
            stale.append(recipient["message_id"])
        sent = sent_ids(gateway)
        assert not sent & set(stale)  # none of them reached the simulator
        assert {lasting, unlimited} <= sent
        # The failure fires its events like any other: the status callback reports it.
        [report] = receiver.wait("callback", 1)
        body = report.json
        assert body["message"]["id"] == stale[0] and body["message"]["status"] == "failed"
        assert body["message"]["external_error"].startswith("expired: ")
