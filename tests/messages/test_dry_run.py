"""Dry run (API.md section 11, issue 13 point 1): every check of a real send and its answer, nothing
stored, sent or evented, no idempotency record. Over HTTP on both databases."""

from __future__ import annotations

import time
from typing import Any

from support.app_in_thread import sql
from support.harness import MAIN, Gateway, marketing_preference, new_number, wait_for

OTP = {"name": "otp_code", "language": "en", "parameters": ["482913"]}
SALE = {"name": "spring_sale", "language": "en", "parameters": ["20%", "20%", "spring"]}


def dry(gateway: Gateway, body: dict[str, Any], **headers: str) -> Any:
    return gateway.http.post(
        gateway.v1("/whatsapp/messages"),
        params={"dry_run": "true"},
        json={"channel_id": gateway.ids["main"], **body},
        headers=gateway.headers(**headers),
    )


def stored_for(gateway: Gateway, number: str) -> list[Any]:
    return sql(
        gateway.database_url,
        "SELECT 1 FROM contacts JOIN conversations ON conversations.contact_id = contacts.id"
        " WHERE contacts.phone_number = :n",
        n=number,
    ) + sql(gateway.database_url, "SELECT 1 FROM messages WHERE phone_number = :n", n=number)


def test_a_dry_run_answers_what_the_send_would_be_and_stores_nothing(gateway: Gateway) -> None:
    number = new_number()
    answer = dry(gateway, {"phone_number": number, "template": OTP}, **{"Idempotency-Key": "dry-1"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["dry_run"] is True and body["sent_as"] == "template"
    assert "482913" in body["preview"]
    assert body["template"]["name"] == "otp_code" and body["template"]["category"] == "AUTHENTICATION"
    assert body["cost"] == {"amount": "0.036", "currency": "AZN", "category": "AUTHENTICATION"}
    assert body["window"]["open"] is False and body["window"]["phone_number"] == number
    time.sleep(0.3)
    assert stored_for(gateway, number) == []
    assert gateway.sim.messages(to=number.lstrip("+")) == []
    # No idempotency record: the same key then serves a real send of another body.
    real = gateway.send(
        {"phone_number": number, "text": "hi", "fallback_template": OTP}, **{"Idempotency-Key": "dry-1"}
    )
    assert real.status_code == 201, real.text


def test_a_dry_run_refuses_exactly_as_a_real_send(gateway: Gateway) -> None:
    number = new_number()
    for body in (
        {"phone_number": number, "text": "hello"},  # window closed, no fallback
        {"phone_number": "12345", "template": OTP},
        {"phone_number": number, "template": {"name": "no_such_template", "language": "en"}},
        {"phone_number": number, "template": {"name": "otp_code", "language": "en", "parameters": []}},
        {"phone_number": number},
        {"phone_number": number, "template": OTP, "channel_id": gateway.ids["globex_channel"]},
    ):
        preview, real = dry(gateway, body), gateway.send(body)
        assert preview.status_code == real.status_code and preview.status_code >= 400, (body, preview.text)
        assert preview.json()["error"]["code"] == real.json()["error"]["code"]


def test_a_dry_run_of_text_in_an_open_window_is_a_session_message_at_its_price(gateway: Gateway) -> None:
    number = new_number()
    gateway.sim.http.post(
        f"{gateway.sim.url}/_sim/inbound",
        json={"phone_number_id": MAIN["phone_number_id"], "from": number, "text": "hi"},
    ).raise_for_status()
    wait_for(lambda: dry(gateway, {"phone_number": number, "text": "x"}).status_code == 200, what="window")
    body = dry(gateway, {"phone_number": number, "text": "Your order shipped"}).json()
    assert (body["sent_as"], body["preview"], body["template"]) == ("session", "Your order shipped", None)
    # Charged since 2026-10-01 (the default price list; tests/messages/test_prices_by_date.py before).
    assert body["cost"] == {"amount": "0.036", "currency": "AZN", "category": "SESSION"}
    assert body["window"]["open"] is True
    assert 0 < body["window"]["seconds_remaining"] <= 86_400


def test_a_dry_run_knows_a_stopped_marketing_preference(gateway: Gateway) -> None:
    number = new_number()
    assert dry(gateway, {"phone_number": number, "template": SALE}).status_code == 200
    marketing_preference(gateway, number, "stop", int(time.time()))
    refused = wait_for(
        lambda: (r := dry(gateway, {"phone_number": number, "template": SALE})).status_code == 422 and r,
        what="the stop to apply",
    )
    assert refused.json()["error"]["code"] == "marketing_preference_stopped"
