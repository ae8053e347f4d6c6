"""Deliveries and `after_seconds` reports are rows in the database: a restart loses none of them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet
from standardwebhooks import Webhook

from support.app_in_thread import running_gateway
from support.harness import Simulator, new_number, wait_for
from support.receiver import Receiver

SETTINGS = {"allow_private_urls": True, "event_retry_base_seconds": 1.0}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.stop()


def test_a_restart_keeps_pending_deliveries_and_due_reports(
    database_url: str, simulator: Simulator, receiver: Receiver
) -> None:
    key = Fernet.generate_key().decode()
    receiver.answer("hook", *[500] * 1000)  # the endpoint is down until the restart
    with running_gateway(database_url, simulator, secret_key=key, **SETTINGS) as first:
        created = first.http.post(
            first.v1("/webhooks"), json={"url": receiver.url("hook")}, headers=first.headers()
        ).json()
        accepted = time.time()
        callback = {"url": receiver.url("report"), "after_seconds": 4, "secret": "kept across restarts"}
        response = first.otp(new_number(), status_callback=callback)
        assert response.status_code == 201, response.text
        message_id = response.json()["id"]
        failed = receiver.wait("hook", 1)  # `delivered` was attempted once and failed
        assert failed[0].status == 500
    receiver.answer_ok("hook")  # the gateway is down now; the endpoint comes back

    with running_gateway(database_url, simulator, secret_key=key, **SETTINGS):
        [report] = receiver.wait("report", 1, timeout=15)
        assert report.at - accepted >= 4.0 - 0.05
        body = Webhook(b"kept across restarts").verify(report.body, report.headers)
        assert body["reason"] == "after_seconds" and body["message"]["id"] == message_id

        def redelivered() -> bool:
            return any(r.status == 200 for r in receiver.received("hook"))

        wait_for(redelivered, timeout=15, what="the webhook delivery after the restart")
        about_it = [r for r in receiver.received("hook") if r.json["message"]["id"] == message_id]
        assert len({r.headers["webhook-id"] for r in about_it}) == 1  # the same event, retried
        Webhook(created["secret"]).verify(about_it[-1].body, about_it[-1].headers)
