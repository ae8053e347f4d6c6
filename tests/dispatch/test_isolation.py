"""One bad row never stalls a lane (issue 9, item 1), on both databases.

Each test puts one row a lane cannot write in front of ordinary ones, and checks that the ordinary ones
go on: a status_callback secret as long as the API accepts (its ciphertext did not fit its column on
PostgreSQL, so every event write carrying it failed, again and again), a send whose answer repeats a
wamid another message already has (its outcome breaks a unique constraint on both databases), and a
webhook deleted while its delivery was under way (the attempt's delivery is gone).
"""

from __future__ import annotations

from typing import Any

import pytest
from standardwebhooks import Webhook

from support.gateway_process import query
from support.harness import Gateway, Simulator, new_number, wait_for
from support.receiver import Receiver

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}


@pytest.fixture(scope="module")
def gateway(delivering_gateway: Gateway) -> Gateway:
    return delivering_gateway


def sent(gateway: Gateway, **extra: Any) -> dict[str, Any]:
    response = gateway.otp(new_number(), **extra)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def dead_letters(gateway: Gateway, kind: str) -> list[tuple[Any, ...]]:
    return query(
        gateway.database_url,
        f"SELECT reference, error FROM dead_letters WHERE kind = '{kind}' ORDER BY id",  # noqa: S608
    )


def test_a_callback_secret_as_long_as_accepted_is_used_and_stalls_nothing(
    gateway: Gateway, receiver: Receiver
) -> None:
    secret = "k" * 500  # the longest the API accepts
    long_one = sent(
        gateway,
        status_callback={"url": receiver.url("long-secret"), "secret": secret, "after_seconds": 1},
    )
    plain = sent(gateway, status_callback={"url": receiver.url("plain-secret"), "secret": "short"})
    [report] = wait_for(lambda: receiver.received("long-secret"), what="the after_seconds report")
    body = Webhook(secret.encode()).verify(report.body, report.headers)
    assert (body["reason"], body["message"]["id"]) == ("after_seconds", long_one["id"])
    wait_for(
        lambda: any(r.json["message"]["id"] == plain["id"] for r in receiver.received("plain-secret")),
        what="the other message's report",
    )
    assert gateway.wait_status(long_one["id"], "delivered")["status"] == "delivered"


def test_a_send_outcome_that_cannot_be_stored_is_parked_and_the_next_ones_are_recorded(
    gateway: Gateway, simulator: Simulator
) -> None:
    first = gateway.wait_status(sent(gateway)["id"], "delivered")
    # The upstream answers the next send to this number with the wamid it gave the first message.
    number = new_number()
    simulator.configure(answer_wamid_next={"to": number, "wamid": first["upstream_message_id"]})
    repeated = gateway.otp(number)
    assert repeated.status_code == 201, repeated.text
    # And rejects another one at once (131009): that outcome must be recorded all the same.
    rejected_number = new_number()
    simulator.configure(fail_next={"count": 1, "code": 131009, "to": rejected_number})
    rejected = gateway.otp(rejected_number)
    assert rejected.status_code == 201, rejected.text

    failed = gateway.wait_status(rejected.json()["id"], "failed")
    assert failed["external_error"].startswith("131009")
    parked = wait_for(lambda: dead_letters(gateway, "send_outcome"), what="the parked outcome")
    assert [reference for reference, _ in parked] == [repeated.json()["id"]]
    assert "unique" in parked[0][1].lower() or "duplicate" in parked[0][1].lower(), parked
    # The lane goes on sending and recording as before.
    assert gateway.wait_status(sent(gateway)["id"], "delivered")["status"] == "delivered"
    assert gateway.message(first["id"])["upstream_message_id"] == first["upstream_message_id"]


def test_a_webhook_deleted_while_its_delivery_is_under_way_stalls_no_other(
    gateway: Gateway, receiver: Receiver
) -> None:
    hooks = gateway.v1("/webhooks")
    made = [
        gateway.http.post(hooks, json={"url": receiver.url(path)}, headers=gateway.headers()).json()
        for path in ("deleted-midway", "kept")
    ]
    doomed, kept = made
    receiver.slow_down("deleted-midway", 2.0)
    message = sent(gateway)
    wait_for(lambda: receiver.received("kept"), what="the kept webhook's first event")
    assert gateway.http.delete(f"{hooks}/{doomed['id']}", headers=gateway.headers()).status_code == 204
    # After the slow call came back (and its attempt had nowhere to go), events keep being recorded.
    wait_for(lambda: receiver.received("deleted-midway"), timeout=5, what="the slow call to end")
    later = sent(gateway)

    def recorded() -> bool:
        listed = gateway.http.get(f"{hooks}/{kept['id']}/deliveries", headers=gateway.headers()).json()
        states = {(d["payload"]["message"]["id"], d["state"]) for d in listed["data"]}
        return (later["id"], "delivered") in states and (message["id"], "delivered") in states

    wait_for(recorded, timeout=10, what="the kept webhook's deliveries recorded as delivered")
    gateway.http.delete(f"{hooks}/{kept['id']}", headers=gateway.headers())
