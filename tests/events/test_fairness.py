"""Event delivery is shared fairly between accounts (issue 9, item 8), on both databases.

An account whose endpoint never answers used to take the event lane's every call (256 of them, each
waiting out its 10 s timeout), and every other account's events waited behind it. Here Acme's webhook
hangs while Acme sends hundreds of messages; Globex's event must still arrive at once.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from support.harness import ADMIN_TOKEN, OTHER_TOKEN, Gateway, new_number, wait_for
from support.receiver import Receiver

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
FLOOD = 400  # Acme's messages: each makes a message_created event at once


@pytest.fixture(scope="module")
def gateway(delivering_gateway: Gateway) -> Gateway:
    return delivering_gateway


def test_an_account_whose_endpoint_hangs_does_not_hold_up_another_accounts_events(
    gateway: Gateway, receiver: Receiver
) -> None:
    receiver.slow_down("hangs", 11.0)  # longer than the 10 s a delivery may take
    hooks = {
        account: gateway.http.post(
            gateway.v1("/webhooks", gateway.ids[account]),
            json={"url": receiver.url(path), "events": ["message_created"]},
            headers=gateway.headers(token),
        )
        for account, path, token in (("acme", "hangs", ADMIN_TOKEN), ("globex", "answers", OTHER_TOKEN))
    }
    assert all(r.status_code == 201 for r in hooks.values()), [r.text for r in hooks.values()]
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda _: gateway.otp(new_number()).status_code, range(FLOOD)))
        assert answers == [201] * FLOOD
        time.sleep(1.0)  # Acme's events are under way by now, hanging

        posted = time.monotonic()
        response = gateway.http.post(
            gateway.v1("/whatsapp/messages", gateway.ids["globex"]),
            json={"channel_id": gateway.ids["globex_channel"], "phone_number": new_number(), "template": OTP},
            headers=gateway.headers(OTHER_TOKEN),
        )
        assert response.status_code == 201, response.text
        message_id = response.json()["id"]
        wait_for(
            lambda: any(r.json["message"]["id"] == message_id for r in receiver.received("answers")),
            timeout=10,
            interval=0.05,
            what="Globex's message_created event",
        )
        took = time.monotonic() - posted
        print(f"Globex's event arrived {took:.2f} s after its send, with Acme's {FLOOD} events hanging")
        assert took < 3.0, f"Globex's event waited {took:.1f} s behind Acme's hanging endpoint"
    finally:
        for account, created in hooks.items():
            token = ADMIN_TOKEN if account == "acme" else OTHER_TOKEN
            gateway.http.delete(
                gateway.v1(f"/webhooks/{created.json()['id']}", gateway.ids[account]),
                headers=gateway.headers(token),
            )
        receiver.slow_down("hangs", 0.0)
