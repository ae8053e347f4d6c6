"""Held sends (API.md section 14): under template pacing Meta answers a template send with
`message_status: "held_for_quality_assessment"`. The message is neither failed nor sent again; it shows
`upstream_status` until its first status webhook moves it on. Both databases, over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from support.app_in_thread import sql
from support.harness import Gateway, held_template_sends, new_number, wait_for

ORDER = {"name": "order_update", "language": "en", "parameters": ["A-1", "shipped"]}
HELD = "held_for_quality_assessment"


@pytest.fixture
def pacing(gateway: Gateway) -> Iterator[None]:
    """The simulator holds template sends until the test releases them."""
    with held_template_sends(gateway.sim):
        yield


def release(gateway: Gateway, number: str) -> None:
    released = gateway.sim.http.post(f"{gateway.sim.url}/_sim/held/release", json={"to": number})
    assert released.json() == {"released": 1}


def sent(response: httpx.Response) -> str:
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    return message_id


def test_a_held_send_waits_without_failing_and_is_never_sent_again(gateway: Gateway, pacing: None) -> None:
    number = new_number()
    message_id = sent(gateway.send({"phone_number": number, "template": ORDER}))
    held = wait_for(
        lambda: (m := gateway.message(message_id))["upstream_status"] == HELD and m,
        what="Meta's answer to be recorded",
    )
    assert held["status"] == "sent" and held["upstream_message_id"] is not None
    assert "external_error" not in held
    # Nothing waits to be sent again: the send job is done, and Meta got one request.
    assert sql(gateway.database_url, "SELECT count(*) FROM outbox WHERE message_id = :m", m=message_id) == [
        (0,)
    ]
    assert len(gateway.sim.messages(to=number)) == 1
    listed = gateway.http.get(
        gateway.v1("/whatsapp/messages"), params={"phone_number": number}, headers=gateway.headers()
    ).json()["data"]
    assert [(m["id"], m["upstream_status"]) for m in listed] == [(message_id, HELD)]

    release(gateway, number)
    delivered = gateway.wait_status(message_id, "delivered")
    assert delivered["upstream_status"] is None
    assert [h["status"] for h in delivered["status_history"]] == ["sent", "delivered"]
    assert delivered["cost"] == {"amount": "0.036", "currency": "AZN", "category": "UTILITY"}
    assert len(gateway.sim.messages(to=number)) == 1


def test_an_accepted_send_has_no_upstream_status(gateway: Gateway, pacing: None) -> None:
    """Pacing holds marketing and utility templates: an OTP and free text are `accepted` (null)."""
    number = new_number()
    otp = sent(gateway.otp(number))
    wait_for(lambda: gateway.message(otp)["upstream_message_id"], what="the OTP's wamid")
    assert gateway.message(otp)["upstream_status"] is None
    assert gateway.wait_status(otp, "delivered")["upstream_status"] is None
