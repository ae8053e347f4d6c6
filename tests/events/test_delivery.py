"""API.md section 8, delivery: signed events reach a real loopback receiver, retried, ordered, disabled."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from standardwebhooks import Webhook

from support.app_in_thread import running_gateway
from support.harness import (
    ADMIN_TOKEN,
    AGENT_TOKEN,
    MAIN,
    OTHER_TOKEN,
    Gateway,
    Simulator,
    new_number,
    wait_for,
)
from support.receiver import Received, Receiver
from wagate.events.http import EventPoster

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
RETRY_BASE = 0.3  # seconds before the first retry (the next ones grow 6-fold)
DISABLE_AFTER = 3  # failed attempts in a row


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    with running_gateway(
        database_url,
        simulator,
        allow_private_urls=True,  # the receiver is on loopback
        event_retry_base_seconds=RETRY_BASE,
        webhook_disable_after_failures=DISABLE_AFTER,
        webhook_disable_after_seconds=0,
    ) as running:
        yield running


Register = Callable[..., dict[str, Any]]


@pytest.fixture
def register(gateway: Gateway, receiver: Receiver) -> Iterator[Register]:
    """Register a webhook aimed at one receiver path; deleted again after the test."""
    made: list[tuple[str, str]] = []

    def make(path: str, *, token: str = ADMIN_TOKEN, account: str = "acme", **body: Any) -> dict[str, Any]:
        hooks = gateway.v1("/webhooks", gateway.ids[account])
        response = gateway.http.post(
            hooks, json={"url": receiver.url(path), **body}, headers=gateway.headers(token)
        )
        assert response.status_code == 201, response.text
        webhook: dict[str, Any] = response.json()
        made.append((f"{hooks}/{webhook['id']}", token))
        return webhook

    yield make
    for url, token in made:
        gateway.http.delete(url, headers=gateway.headers(token))


def about(received: list[Received], message_id: str) -> list[Received]:
    return [r for r in received if r.json["message"]["id"] == message_id]


def wait_events(
    receiver: Receiver, path: str, message_id: str, count: int, timeout: float = 10.0
) -> list[Received]:
    def enough() -> list[Received] | None:
        got = about(receiver.received(path), message_id)
        return got if len(got) >= count else None

    return wait_for(
        enough,
        timeout=timeout,
        what=f"{count} events about {message_id} at /{path}",
    )


def delivered_otp(gateway: Gateway, **extra: Any) -> dict[str, Any]:
    response = gateway.otp(new_number(), **extra)
    assert response.status_code == 201, response.text
    return gateway.wait_status(response.json()["id"], "delivered")


def push_read(
    gateway: Gateway, message: dict[str, Any], phone_number_id: str = MAIN["phone_number_id"]
) -> None:
    body = {"phone_number_id": phone_number_id, "wamid": message["upstream_message_id"], "status": "read"}
    gateway.sim.http.post(f"{gateway.sim.url}/_sim/statuses", json=body).raise_for_status()


def webhook_of(gateway: Gateway, webhook_id: int) -> dict[str, Any]:
    listed = gateway.http.get(gateway.v1("/webhooks"), headers=gateway.headers()).json()["data"]
    found: dict[str, Any] = next(w for w in listed if w["id"] == webhook_id)
    return found


def deliveries(gateway: Gateway, webhook_id: int, **params: Any) -> list[dict[str, Any]]:
    response = gateway.http.get(
        gateway.v1(f"/webhooks/{webhook_id}/deliveries"), params=params, headers=gateway.headers()
    )
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def test_each_status_change_is_one_signed_message_updated_event_in_order(
    gateway: Gateway, receiver: Receiver, register: Register
) -> None:
    webhook = register("updates")
    message = delivered_otp(gateway)
    push_read(gateway, message)
    events = wait_events(receiver, "updates", message["id"], 2)
    signer = Webhook(webhook["secret"])
    for event in events:
        # What a subscriber using the public library does: it raises on a bad signature.
        assert signer.verify(event.body, event.headers) == event.json
    bodies = [e.json for e in events]
    assert [(b["previous_status"], b["message"]["status"]) for b in bodies] == [
        ("sent", "delivered"),
        ("delivered", "read"),
    ]
    assert all(b["event"] == "message_updated" and b["account_id"] == gateway.ids["acme"] for b in bodies)
    # Each carries the message as it was right after its change.
    assert [h["status"] for h in bodies[0]["message"]["status_history"]] == ["sent", "delivered"]
    final = gateway.wait_status(message["id"], "read")
    assert bodies[1]["message"] == final
    assert len({e.headers["webhook-id"] for e in events}) == 2


def test_events_reach_only_the_account_that_owns_the_message(
    gateway: Gateway, receiver: Receiver, register: Register
) -> None:
    register("acme-only")
    register("globex-only", token=OTHER_TOKEN, account="globex")
    acme = delivered_otp(gateway)
    response = gateway.http.post(
        gateway.v1("/whatsapp/messages", gateway.ids["globex"]),
        json={"channel_id": gateway.ids["globex_channel"], "phone_number": new_number(), "template": OTP},
        headers=gateway.headers(OTHER_TOKEN),
    )
    assert response.status_code == 201, response.text
    globex_id = response.json()["id"]
    wait_events(receiver, "acme-only", acme["id"], 1)
    wait_events(receiver, "globex-only", globex_id, 1)
    assert about(receiver.received("globex-only"), acme["id"]) == []
    assert about(receiver.received("acme-only"), globex_id) == []
    assert {r.json["account_id"] for r in receiver.received("globex-only")} == {gateway.ids["globex"]}


def test_failed_attempts_are_retried_with_the_same_id_and_later_events_wait_their_turn(
    gateway: Gateway, receiver: Receiver, register: Register
) -> None:
    webhook = register("flaky")
    receiver.answer("flaky", 500, 500)
    message = delivered_otp(gateway)
    push_read(gateway, message)  # while `delivered` is still being retried
    events = wait_events(receiver, "flaky", message["id"], 4, timeout=15)
    assert [(e.status, e.json["previous_status"]) for e in events] == [
        (500, "sent"),
        (500, "sent"),
        (200, "sent"),
        (200, "delivered"),
    ]
    assert len({e.headers["webhook-id"] for e in events[:3]}) == 1
    assert events[3].headers["webhook-id"] != events[0].headers["webhook-id"]
    first_gap, second_gap = events[1].at - events[0].at, events[2].at - events[1].at
    assert first_gap >= RETRY_BASE * 0.7 and second_gap > first_gap  # growing delays
    signer = Webhook(webhook["secret"])
    for event in events:
        signer.verify(event.body, event.headers)

    recorded = next(
        d for d in deliveries(gateway, webhook["id"]) if d["id"] == events[0].headers["webhook-id"]
    )
    assert recorded["state"] == "delivered" and recorded["event"] == "message_updated"
    assert [(a["status_code"], a["succeeded"]) for a in recorded["attempts"]] == [
        (500, False),
        (500, False),
        (200, True),
    ]
    assert recorded["attempts"][0]["error"] == "HTTP 500"
    # The receiver's answer is not shown: it is on loopback, posted to only because the deployment
    # allows private URLs (tests/events/test_ssrf_guard.py shows a public one's).
    assert recorded["attempts"][0]["response"] is None
    assert all(a["latency_ms"] >= 0 and a["at"].endswith("Z") for a in recorded["attempts"])
    assert webhook_of(gateway, webhook["id"])["consecutive_failures"] == 0


def test_410_stops_retries_and_disables_the_webhook_until_an_administrator_enables_it(
    gateway: Gateway, receiver: Receiver, register: Register
) -> None:
    webhook = register("gone")
    register("control")
    receiver.answer("gone", 410)
    first = delivered_otp(gateway)
    wait_for(lambda: not webhook_of(gateway, webhook["id"])["enabled"], what="the webhook to be disabled")
    disabled = webhook_of(gateway, webhook["id"])
    assert "410" in disabled["disabled_reason"]
    [gone] = wait_events(receiver, "gone", first["id"], 1)
    delivery = next(d for d in deliveries(gateway, webhook["id"]) if d["id"] == gone.headers["webhook-id"])
    assert delivery["state"] == "failed" and len(delivery["attempts"]) == 1

    # Nothing more goes to a disabled webhook: a later message reaches the control endpoint only.
    later = delivered_otp(gateway)
    wait_events(receiver, "control", later["id"], 1)
    assert about(receiver.received("gone"), later["id"]) == []

    url = gateway.v1(f"/webhooks/{webhook['id']}/deliveries/{delivery['id']}/redeliver")
    refused = gateway.http.post(url, headers=gateway.headers())
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "webhook_disabled"
    enabled = gateway.http.patch(
        gateway.v1(f"/webhooks/{webhook['id']}"), json={"enabled": True}, headers=gateway.headers()
    )
    assert enabled.status_code == 200 and enabled.json()["enabled"] is True
    assert enabled.json()["disabled_reason"] is None
    again = gateway.http.post(url, headers=gateway.headers())
    assert again.status_code == 202 and again.json()["state"] == "pending"
    resent = wait_events(receiver, "gone", first["id"], 2)
    assert resent[1].headers["webhook-id"] == gone.headers["webhook-id"] and resent[1].status == 200
    assert resent[1].json == gone.json


def test_a_long_run_of_failures_disables_the_webhook_with_the_reason(
    gateway: Gateway, receiver: Receiver, register: Register
) -> None:
    webhook = register("down")
    receiver.answer("down", *[503] * 20)
    delivered_otp(gateway)
    wait_for(
        lambda: not webhook_of(gateway, webhook["id"])["enabled"],
        timeout=15,
        what="the webhook to be disabled",
    )
    reason = webhook_of(gateway, webhook["id"])["disabled_reason"]
    assert f"{DISABLE_AFTER} failed attempts in a row" in reason and "HTTP 503" in reason
    assert len(receiver.received("down")) == DISABLE_AFTER
    failed = deliveries(gateway, webhook["id"], state="failed")
    assert failed and all(d["state"] == "failed" for d in failed)


def test_the_deliveries_list_is_for_administrators_of_the_account(
    gateway: Gateway, receiver: Receiver, register: Register
) -> None:
    webhook = register("paged")
    for _ in range(3):
        delivered_otp(gateway)
    wait_for(lambda: len(deliveries(gateway, webhook["id"], state="delivered")) >= 3, what="3 deliveries")
    newest_first = deliveries(gateway, webhook["id"])
    assert [d["id"] for d in newest_first] == sorted((d["id"] for d in newest_first), reverse=True)
    page = deliveries(gateway, webhook["id"], limit=1)
    older = deliveries(gateway, webhook["id"], limit=1, before=page[0]["id"])
    assert len(page) == 1 and older[0]["id"] == newest_first[1]["id"]

    path = f"/webhooks/{webhook['id']}/deliveries"
    agent = gateway.http.get(gateway.v1(path), headers=gateway.headers(AGENT_TOKEN))
    assert agent.status_code == 403 and agent.json()["error"]["code"] == "administrator_required"
    other = gateway.http.get(gateway.v1(path, gateway.ids["globex"]), headers=gateway.headers(OTHER_TOKEN))
    assert other.status_code == 404 and other.json()["error"]["code"] == "webhook_not_found"
    unknown = gateway.http.get(gateway.v1("/webhooks/999999/deliveries"), headers=gateway.headers())
    assert unknown.status_code == 404


def test_status_callback_reports_every_change_signed_with_a_plain_secret(
    gateway: Gateway, receiver: Receiver
) -> None:
    callback = {"url": receiver.url("callback-signed"), "secret": "a plain secret"}
    message = delivered_otp(gateway, status_callback=callback)
    push_read(gateway, message)
    reports = wait_events(receiver, "callback-signed", message["id"], 2)
    signer = Webhook(b"a plain secret")  # the UTF-8 bytes of a secret that is not whsec_
    bodies = [signer.verify(r.body, r.headers) for r in reports]
    assert [(b["event"], b["reason"], b["previous_status"], b["message"]["status"]) for b in bodies] == [
        ("message_status", "status_changed", "sent", "delivered"),
        ("message_status", "status_changed", "delivered", "read"),
    ]
    url = gateway.v1(f"/whatsapp/messages/{message['id']}/deliveries")

    def recorded() -> list[tuple[str, str]] | None:
        listed = gateway.http.get(url, headers=gateway.headers(AGENT_TOKEN))
        assert listed.status_code == 200, listed.text
        found = [(d["state"], d["payload"]["message"]["status"]) for d in listed.json()["data"]]
        return found if all(state != "pending" for state, _ in found) else None  # attempts recorded

    assert wait_for(recorded, what="both attempts recorded") == [
        ("delivered", "read"),
        ("delivered", "delivered"),
    ]


def test_a_status_callback_without_secret_is_sent_unsigned(gateway: Gateway, receiver: Receiver) -> None:
    message = delivered_otp(
        gateway, status_callback={"url": receiver.url("callback-plain"), "on_change": True}
    )
    [report] = wait_events(receiver, "callback-plain", message["id"], 1)
    assert "webhook-signature" not in report.headers
    assert report.headers["webhook-id"].startswith("evt_") and report.headers["webhook-timestamp"].isdigit()


def test_after_seconds_reports_once_on_time_with_the_status_then(
    gateway: Gateway, receiver: Receiver
) -> None:
    accepted = time.time()
    response = gateway.otp(new_number(), status_callback={"url": receiver.url("after"), "after_seconds": 2})
    assert response.status_code == 201, response.text
    message_id = response.json()["id"]
    gateway.wait_status(message_id, "delivered")
    [report] = wait_events(receiver, "after", message_id, 1, timeout=8)
    assert 2.0 - 0.05 <= report.at - accepted <= 2.0 + 1.5
    body = report.json
    assert (body["event"], body["reason"]) == ("message_status", "after_seconds")
    assert (body["previous_status"], body["message"]["status"]) == ("sent", "delivered")
    # Only the scheduled report: `on_change` is off when only `after_seconds` is asked for.
    listed = gateway.http.get(
        gateway.v1(f"/whatsapp/messages/{message_id}/deliveries"), headers=gateway.headers()
    )
    assert [d["payload"]["reason"] for d in listed.json()["data"]] == ["after_seconds"]


def test_deliveries_never_connect_to_a_private_address_unless_allowed(receiver: Receiver) -> None:
    async def attempt(url: str, *, allow_private: bool) -> tuple[int | None, str | None]:
        poster = EventPoster(allow_private=allow_private)
        try:
            result = await poster.post(url, b"{}", {"content-type": "application/json"})
        finally:
            await poster.close()
        return result.status_code, result.error

    literal = receiver.url("ssrf")  # http://127.0.0.1:port/ssrf
    by_name = literal.replace("127.0.0.1", "localhost")
    for url in (literal, by_name):
        status, error = asyncio.run(attempt(url, allow_private=False))
        assert status is None and error, url
    assert receiver.received("ssrf") == []
    assert asyncio.run(attempt(by_name, allow_private=True)) == (200, None)
    assert len(receiver.received("ssrf")) == 1


def test_subscribers_choose_message_created_and_conversation_status_changed(
    gateway: Gateway, receiver: Receiver, register: Register
) -> None:
    webhook = register("kinds", events=["message_created", "conversation_status_changed"])
    number = new_number()
    response = gateway.otp(number)
    assert response.status_code == 201, response.text
    message_id = response.json()["id"]
    gateway.wait_status(message_id, "delivered")
    gateway.sim.inbound(MAIN["phone_number_id"], number.removeprefix("+"), "thanks, got it")

    def arrived() -> list[dict[str, Any]] | None:
        bodies = [r.json for r in receiver.received("kinds")]
        mine = [
            b
            for b in bodies
            if b.get("message", {}).get("phone_number") == number
            or b.get("conversation", {}).get("phone_number") == number
        ]
        return mine if len(mine) >= 4 else None

    bodies = wait_for(arrived, what="4 events about the conversation")
    signer = Webhook(webhook["secret"])
    for received in receiver.received("kinds"):
        signer.verify(received.body, received.headers)
    created = [b for b in bodies if b["event"] == "message_created"]
    assert [(b["direction"], b["message"]["status"]) for b in created] == [
        ("outbound", "sent"),
        ("inbound", "delivered"),
    ]
    assert created[0]["message"]["id"] == message_id and created[1]["message"]["text"] == "thanks, got it"
    conversation = [b for b in bodies if b["event"] == "conversation_status_changed"]
    assert [(b["previous_status"], b["conversation"]["status"]) for b in conversation] == [
        (None, "resolved"),
        ("resolved", "open"),
    ]
    assert all(b["event"] != "message_updated" for b in bodies)  # not subscribed


def test_an_endpoint_that_answers_too_late_is_a_failed_attempt(receiver: Receiver) -> None:
    receiver.slow_down("slow", 1.0)

    async def attempt() -> tuple[int | None, str | None]:
        # The 10 s of API.md, shortened so that the test does not wait for it.
        poster = EventPoster(allow_private=True, timeout=0.3)
        try:
            result = await poster.post(receiver.url("slow"), b"{}", {"content-type": "application/json"})
        finally:
            await poster.close()
        return result.status_code, result.error

    assert asyncio.run(attempt()) == (None, "no answer within 0.3 s")
