"""Meta's statuses apply only to messages of the channel they came for (issue 9, item 4).

A status names its channel by `metadata.phone_number_id`; our own id in `biz_opaque_callback_data`
ties it to a message only while that message's wamid is unknown (the send's reply was lost) or the same.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from support.harness import APP_SECRET, GLOBEX, MAIN, SECOND, Gateway, new_number, wait_for
from wagate.simulator.magic import MAGIC_SLOW
from wagate.whatsapp.signature import sign

UNKNOWN_NUMBER_ID = "999000111222333"


def post_status(gateway: Gateway, phone_number_id: str, status: dict[str, Any]) -> None:
    body = {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": "102290129340398",
                "changes": [
                    {
                        "field": "messages",
                        "value": {
                            "messaging_product": "whatsapp",
                            "metadata": {
                                "display_phone_number": "15550001111",
                                "phone_number_id": phone_number_id,
                            },
                            "statuses": [status],
                        },
                    }
                ],
            }
        ],
    }
    raw = orjson.dumps(body)
    response = gateway.http.post(
        f"{gateway.url}/webhooks/whatsapp",
        content=raw,
        headers={"X-Hub-Signature-256": sign(APP_SECRET, raw), "Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text


def status(wamid: str, kind: str, to: str, **extra: Any) -> dict[str, Any]:
    return {"id": wamid, "status": kind, "timestamp": str(int(time.time())), "recipient_id": to, **extra}


@pytest.fixture
def manual_statuses(gateway: Gateway) -> Iterator[None]:
    """The test sends the status webhooks itself."""
    gateway.sim.configure(auto_statuses=False)
    try:
        yield
    finally:
        gateway.sim.configure(auto_statuses=True, slow_response_seconds=30)


def sent_message(gateway: Gateway) -> tuple[str, str, str]:
    """A message Meta accepted on channel Main: (message id, wamid, recipient digits)."""
    number = new_number()
    message_id = gateway.otp(number).json()["id"]
    message = wait_for(lambda: (m := gateway.message(message_id))["upstream_message_id"] and m, what="wamid")
    return message_id, message["upstream_message_id"], number.removeprefix("+")


def barrier(gateway: Gateway) -> None:
    """Stored webhook bodies are applied in the order they came: once a status posted now has landed,
    every body posted before it was applied too."""
    message_id, wamid, to = sent_message(gateway)
    post_status(gateway, MAIN["phone_number_id"], status(wamid, "delivered", to))
    gateway.wait_status(message_id, "delivered")


def test_a_status_of_another_channel_does_not_touch_our_message(
    gateway: Gateway, manual_statuses: None
) -> None:
    message_id, wamid, to = sent_message(gateway)
    # Our id, another wamid, and the phone number of another channel: of the same account, of another
    # account, and of no channel at all.
    for phone_number_id in (SECOND["phone_number_id"], GLOBEX["phone_number_id"], UNKNOWN_NUMBER_ID):
        post_status(
            gateway,
            phone_number_id,
            status(f"wamid.other.{phone_number_id}", "read", to, biz_opaque_callback_data=message_id),
        )
    # Even its own wamid, on another channel.
    post_status(gateway, SECOND["phone_number_id"], status(wamid, "delivered", to))
    barrier(gateway)
    message = gateway.message(message_id)
    assert message["status"] == "sent" and message["upstream_message_id"] == wamid
    # The right channel still moves it.
    post_status(gateway, MAIN["phone_number_id"], status(wamid, "delivered", to))
    gateway.wait_status(message_id, "delivered")


def test_our_id_with_another_wamid_does_not_touch_our_message(
    gateway: Gateway, manual_statuses: None
) -> None:
    message_id, wamid, to = sent_message(gateway)
    post_status(
        gateway,
        MAIN["phone_number_id"],
        status("wamid.not-ours", "read", to, biz_opaque_callback_data=message_id),
    )
    barrier(gateway)
    message = gateway.message(message_id)
    assert message["status"] == "sent" and message["upstream_message_id"] == wamid


def slow_send(gateway: Gateway) -> tuple[str, str, str]:
    """An OTP to the number whose reply comes late: our id, and the wamid and `to` Meta got."""
    message_id: str = gateway.otp(MAGIC_SLOW).json()["id"]
    [request] = wait_for(
        lambda: [
            m for m in gateway.sim.messages(to=MAGIC_SLOW) if m["biz_opaque_callback_data"] == message_id
        ],
        what="the upstream request",
    )
    return message_id, request["wamid"], request["to"]


def test_our_id_settles_a_lost_reply_only_on_the_messages_channel(
    gateway: Gateway, manual_statuses: None
) -> None:
    # The Cloud API's reply is lost (slower than our timeout), so the wamid is known only to Meta.
    gateway.sim.configure(slow_response_seconds=30)
    message_id, wamid, to = slow_send(gateway)
    for phone_number_id in (SECOND["phone_number_id"], GLOBEX["phone_number_id"], UNKNOWN_NUMBER_ID):
        post_status(
            gateway,
            phone_number_id,
            status(f"wamid.x{phone_number_id}", "sent", to, biz_opaque_callback_data=message_id),
        )
    barrier(gateway)
    message = gateway.message(message_id)
    assert message["upstream_message_id"] is None and message["status"] == "sent"
    # On its own channel, Meta's status with our id settles it.
    post_status(
        gateway, MAIN["phone_number_id"], status(wamid, "delivered", to, biz_opaque_callback_data=message_id)
    )
    wait_for(lambda: gateway.message(message_id)["upstream_message_id"] == wamid, what="the send settled")


def test_a_parked_status_keeps_its_channel(gateway: Gateway, manual_statuses: None) -> None:
    # The reply comes, but a second late: statuses that come before it wait (are parked) for the wamid.
    gateway.sim.configure(slow_response_seconds=1.5)
    message_id, wamid, to = slow_send(gateway)
    post_status(gateway, SECOND["phone_number_id"], status(wamid, "read", to))
    post_status(gateway, MAIN["phone_number_id"], status(wamid, "delivered", to))
    assert gateway.message(message_id)["upstream_message_id"] is None, (
        "the reply came too early for this test"
    )
    wait_for(lambda: gateway.message(message_id)["upstream_message_id"] == wamid, what="the send's reply")
    barrier(gateway)
    message = gateway.message(message_id)
    assert message["status"] == "delivered"
    assert [h["status"] for h in message["status_history"]] == ["sent", "delivered"]
