"""Endpoint 3 and customer messages: the 24-hour window, free text, fallback, reopened conversations."""

from __future__ import annotations

import time
from typing import Any

from support.harness import MAIN, Gateway, new_number, wait_for

OTP = {"name": "otp_code", "language": "en", "parameters": ["111222"]}


def window(gateway: Gateway, number: str, **params: Any) -> Any:
    query = {"channel_id": gateway.ids["main"], "phone_number": number, **params}
    return gateway.http.get(gateway.v1("/whatsapp/messages/window"), params=query, headers=gateway.headers())


def open_window(gateway: Gateway, number: str, **extra: Any) -> None:
    gateway.sim.http.post(
        f"{gateway.sim.url}/_sim/inbound",
        json={"phone_number_id": MAIN["phone_number_id"], "from": number, "text": "hello", **extra},
    ).raise_for_status()


def test_never_written_window_is_closed_with_nulls(gateway: Gateway) -> None:
    number = new_number()
    response = window(gateway, number)
    assert response.status_code == 200
    assert response.json() == {
        "channel_id": gateway.ids["main"],
        "phone_number": number,
        "open": False,
        "last_customer_message_at": None,
        "expires_at": None,
        "seconds_remaining": 0,
    }


def test_a_customer_message_opens_the_window_and_text_goes_as_a_session_message(gateway: Gateway) -> None:
    number = new_number()
    open_window(gateway, number, name="Ann")
    state = wait_for(lambda: (w := window(gateway, number).json())["open"] and w, what="window to open")
    assert 86_000 < state["seconds_remaining"] <= 86_400
    assert state["last_customer_message_at"].endswith("Z") and state["expires_at"].endswith("Z")
    response = gateway.send({"phone_number": number, "text": "Your order shipped"})
    assert response.status_code == 201 and response.json()["sent_as"] == "session"
    message = gateway.message(response.json()["id"])
    # A session message costs the utility rate since 2026-10-01 (tests/messages/test_prices_by_date.py).
    assert (
        message["cost"] == {"amount": "0.036", "currency": "AZN", "category": "SESSION"}
        and message["text"] == "Your order shipped"
        and message["template"] is None
    )
    [request] = wait_for(lambda: gateway.sim.messages(to=number) or None, what="upstream text")
    assert request["body"]["type"] == "text" and request["body"]["text"] == {"body": "Your order shipped"}
    # With the window open the fallback is not used.
    fallback = gateway.send({"phone_number": number, "text": "Hi again", "fallback_template": OTP})
    assert fallback.json()["sent_as"] == "session"


def test_text_with_a_closed_window_sends_the_fallback_template(gateway: Gateway) -> None:
    number = new_number()
    response = gateway.send({"phone_number": number, "text": "We miss you", "fallback_template": OTP})
    assert response.status_code == 201 and response.json()["sent_as"] == "template"
    message = gateway.message(response.json()["id"])
    assert message["sent_as"] == "template" and message["template"]["name"] == "otp_code"
    assert message["cost"]["amount"] == "0.036"
    [request] = wait_for(lambda: gateway.sim.messages(to=number) or None, what="upstream template")
    assert request["body"]["type"] == "template"


def test_an_old_customer_message_leaves_the_window_closed(gateway: Gateway) -> None:
    number = new_number()
    written_at = int(time.time()) - 25 * 3600
    open_window(gateway, number, timestamp=written_at)
    state = wait_for(
        lambda: (w := window(gateway, number).json())["last_customer_message_at"] and w,
        what="the message to land",
    )
    assert state["open"] is False and state["seconds_remaining"] == 0
    assert state["expires_at"] is not None
    assert gateway.send({"phone_number": number, "text": "late"}).json()["error"]["code"] == "window_closed"


def test_a_reply_reopens_a_resolved_conversation(gateway: Gateway) -> None:
    number = new_number()
    message_id = gateway.send({"phone_number": number, "template": OTP}).json()["id"]
    assert gateway.message(message_id)["conversation"]["status"] == "resolved"
    open_window(gateway, number)
    wait_for(
        lambda: gateway.message(message_id)["conversation"]["status"] == "open", what="conversation to reopen"
    )


def test_window_query_is_validated(gateway: Gateway) -> None:
    missing = gateway.http.get(gateway.v1("/whatsapp/messages/window"), headers=gateway.headers())
    assert missing.status_code == 422 and missing.json()["error"]["code"] == "invalid_request"
    assert window(gateway, "12").json()["error"]["code"] == "invalid_phone_number"
    unknown = window(gateway, new_number(), channel_id=999_999)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "channel_not_found"


def test_each_customer_message_renews_the_window(gateway: Gateway) -> None:
    number = new_number()
    hours_ago = int(time.time()) - 20 * 3600
    open_window(gateway, number, timestamp=hours_ago)
    first = wait_for(lambda: (w := window(gateway, number).json())["open"] and w, what="window to open")
    assert first["seconds_remaining"] < 4 * 3600 + 60
    open_window(gateway, number)
    renewed = wait_for(
        lambda: (w := window(gateway, number).json())["seconds_remaining"] > 23 * 3600 and w,
        what="window to be renewed",
    )
    assert renewed["last_customer_message_at"] > first["last_customer_message_at"]
    assert renewed["expires_at"] > first["expires_at"]
