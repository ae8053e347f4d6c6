"""Endpoints 4 and 5 end to end: accepted, sent in Meta's format, statuses applied, read back."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from support.app_in_thread import sql
from support.harness import MAIN, Gateway, marketing_preference, new_number, wait_for, writes_held

OTP = {"name": "otp_code", "language": "en", "parameters": ["654321"]}


def upstream(gateway: Gateway, number: str, count: int = 1) -> list[dict[str, Any]]:
    return wait_for(
        lambda: (sent := gateway.sim.messages(to=number)) and len(sent) >= count and sent,
        what=f"{count} upstream request(s) to {number}",
    )


def test_otp_goes_out_with_the_code_in_body_and_button(gateway: Gateway) -> None:
    number = new_number()
    response = gateway.otp(number, code="654321")
    assert response.status_code == 201, response.text
    reply = response.json()
    assert reply["sent_as"] == "template" and reply["status"] == "sent" and reply["id"].startswith("msg_")
    [request] = upstream(gateway, number)
    body = request["body"]
    assert request["phone_number_id"] == MAIN["phone_number_id"]
    assert body["messaging_product"] == "whatsapp" and body["to"] == number.removeprefix("+")
    assert body["biz_opaque_callback_data"] == reply["id"]
    assert body["template"]["name"] == "otp_code" and body["template"]["language"] == {"code": "en"}
    components = body["template"]["components"]
    assert {"type": "body", "parameters": [{"type": "text", "text": "654321"}]} in components
    assert {
        "type": "button",
        "sub_type": "url",
        "index": "0",
        "parameters": [{"type": "text", "text": "654321"}],
    } in components


def test_message_object_follows_the_statuses(gateway: Gateway) -> None:
    number = new_number()
    message_id = gateway.otp(number).json()["id"]
    message = gateway.wait_status(message_id, "delivered")
    [request] = upstream(gateway, number)
    assert message["upstream_message_id"] == request["wamid"]
    assert [h["status"] for h in message["status_history"]] == ["sent", "delivered"]
    assert message["status_history"][-1]["status"] == message["status"]
    assert "external_error" not in message or message["external_error"] is None
    assert message["cost"] == {"amount": "0.036", "currency": "AZN", "category": "AUTHENTICATION"}
    assert message["template"] == {
        "name": "otp_code",
        "language": "en",
        "category": "AUTHENTICATION",
        "parameters": ["123456"],
    }
    assert message["text"] is None and message["batch_id"] is None
    assert message["phone_number"] == number and message["channel_id"] == gateway.ids["main"]
    assert message["conversation"]["status"] == "resolved"
    assert message["created_at"].endswith("Z") and message["updated_at"].endswith("Z")


def test_marketing_costs_its_price_and_named_parameters_go_by_name(gateway: Gateway) -> None:
    number = new_number()
    sale = {
        "name": "spring_sale",
        "language": "en",
        "parameters": {"1": "20%", "header.1": "Spring", "button.0": "sp24"},
    }
    message_id = gateway.send({"phone_number": number, "template": sale}).json()["id"]
    assert gateway.message(message_id)["cost"]["amount"] == "0.165"
    components = upstream(gateway, number)[0]["body"]["template"]["components"]
    assert {"type": "header", "parameters": [{"type": "text", "text": "Spring"}]} in components
    assert {
        "type": "button",
        "sub_type": "url",
        "index": "0",
        "parameters": [{"type": "text", "text": "sp24"}],
    } in components

    other = new_number()
    named = {
        "name": "welcome_named",
        "language": "en",
        "parameters": {"order_id": "A-1", "first_name": "Ann"},
    }
    assert gateway.send({"phone_number": other, "template": named}).status_code == 201
    [body_component] = [
        c for c in upstream(gateway, other)[0]["body"]["template"]["components"] if c["type"] == "body"
    ]
    assert body_component["parameters"] == [
        {"type": "text", "text": "Ann", "parameter_name": "first_name"},
        {"type": "text", "text": "A-1", "parameter_name": "order_id"},
    ]


def test_upstream_rejection_after_acceptance_fails_the_message(gateway: Gateway) -> None:
    from wagate.simulator.magic import MAGIC_UNDELIVERABLE

    message_id = gateway.otp(MAGIC_UNDELIVERABLE).json()["id"]
    message = gateway.wait_status(message_id, "failed")
    assert message["external_error"].startswith("131026: ")
    assert message["cost"]["amount"] == "0"
    assert message["status_history"][-1]["status"] == "failed"


def test_synchronous_rejection_stores_metas_code_and_title(gateway: Gateway) -> None:
    # The template vanished at Meta after our last sync: Meta answers 132001 and the send fails.
    number = new_number()
    templates = gateway.sim.http.get(f"{gateway.sim.url}/_sim/templates/{MAIN['waba_id']}").json()["data"]
    remaining = [t for t in templates if t["name"] != "order_update"]
    gateway.sim.http.put(
        f"{gateway.sim.url}/_sim/templates/{MAIN['waba_id']}", json={"data": remaining}
    ).raise_for_status()
    try:
        update = {"name": "order_update", "language": "en", "parameters": ["A-7", "shipped"]}
        message_id = gateway.send({"phone_number": number, "template": update}).json()["id"]
        message = gateway.wait_status(message_id, "failed")
        assert message["external_error"].startswith("132001: ")
        assert message["upstream_message_id"] is None
    finally:
        gateway.sim.http.put(f"{gateway.sim.url}/_sim/templates/{MAIN['waba_id']}", json={"data": templates})


def test_throttled_sends_are_retried_until_meta_takes_them(gateway: Gateway) -> None:
    number = new_number()
    gateway.sim.configure(fail_next={"count": 2, "code": 130429, "to": number})
    message_id = gateway.otp(number).json()["id"]
    gateway.wait_status(message_id, "delivered", timeout=20)
    assert len(gateway.sim.messages(to=number)) == 1


def test_unknown_message_is_404(gateway: Gateway) -> None:
    response = gateway.http.get(gateway.v1("/whatsapp/messages/msg_doesnotexist"), headers=gateway.headers())
    assert response.status_code == 404 and response.json()["error"]["code"] == "message_not_found"


def test_send_resolves_the_conversation_unless_asked_otherwise(gateway: Gateway) -> None:
    number = new_number()
    first = gateway.otp(number, conversation_status="open").json()["id"]
    assert gateway.message(first)["conversation"]["status"] == "open"
    second = gateway.otp(number, conversation_status="pending").json()["id"]
    assert gateway.message(second)["conversation"]["status"] == "pending"
    third = gateway.otp(number).json()["id"]
    conversation = gateway.message(third)["conversation"]
    assert conversation["status"] == "resolved"
    assert conversation["id"] == gateway.message(first)["conversation"]["id"]


def test_idempotency_key_replays_the_first_response_and_sends_once(gateway: Gateway) -> None:
    number = new_number()
    body = {"phone_number": number, "template": OTP}
    first = gateway.send(body, **{"Idempotency-Key": "order-77-otp"})
    again = gateway.send(body, **{"Idempotency-Key": "order-77-otp"})
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    upstream(gateway, number)
    different = gateway.send(
        {**body, "template": {**OTP, "parameters": ["000000"]}}, **{"Idempotency-Key": "order-77-otp"}
    )
    assert different.status_code == 422 and different.json()["error"]["code"] == "idempotency_key_reused"
    assert len(gateway.sim.messages(to=number)) == 1
    too_long = gateway.send(body, **{"Idempotency-Key": "k" * 256})
    assert too_long.status_code == 422


def test_a_repeat_gets_its_first_answer_though_the_send_would_now_be_refused(gateway: Gateway) -> None:
    """The key decides before the checks: a client retrying a marketing send after the customer said
    STOP gets the 201 it missed (the message went out), not a 422 for a send it never meant twice;
    another body under that key is still 422 `idempotency_key_reused`."""
    number = new_number()
    sale = {"name": "spring_sale", "language": "en", "parameters": ["20%", "20%", "spring"]}
    body = {"phone_number": number, "template": sale}
    key = {"Idempotency-Key": f"sale-{number}"}
    first = gateway.send(body, **key)
    assert first.status_code == 201, first.text
    marketing_preference(gateway, number, "stop", int(time.time()))
    wait_for(  # a dry run: the same checks, nothing sent
        lambda: (
            gateway.http.post(
                gateway.v1("/whatsapp/messages"),
                params={"dry_run": "true"},
                json={"channel_id": gateway.ids["main"], **body},
                headers=gateway.headers(),
            ).status_code
            == 422
        ),
        what="the customer's stop to apply",
    )
    again = gateway.send(body, **key)
    assert (again.status_code, again.json()) == (201, first.json())
    other = gateway.send({**body, "template": {**sale, "parameters": ["30%", "30%", "summer"]}}, **key)
    assert other.status_code == 422 and other.json()["error"]["code"] == "idempotency_key_reused"
    wait_for(lambda: gateway.sim.messages(to=number), what="the first send at Meta")
    assert len(gateway.sim.messages(to=number)) == 1


def test_idempotency_keys_are_scoped_to_the_api_key(gateway: Gateway) -> None:
    from support.harness import AGENT_TOKEN

    body = {"phone_number": new_number(), "template": OTP}
    first = gateway.send(body, **{"Idempotency-Key": "shared-key"})
    second = gateway.send(body, token=AGENT_TOKEN, **{"Idempotency-Key": "shared-key"})
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] != second.json()["id"]


def test_an_ambiguous_answer_is_not_sent_again(gateway: Gateway) -> None:
    # Meta answers 500 once: it may or may not have the message, so no blind second send. With no
    # status webhook within the grace period the message fails, and the caller can fall back.
    number = new_number()
    gateway.sim.configure(fail_next={"count": 1, "code": 500, "to": number})
    message_id = gateway.otp(number).json()["id"]
    message = gateway.wait_status(message_id, "failed", timeout=15)
    assert message["external_error"].startswith("upstream_unconfirmed: ")
    assert gateway.sim.messages(to=number) == []  # a second try would have gone through


def test_concurrent_repeats_of_one_idempotency_key_send_once(gateway: Gateway) -> None:
    number = new_number()
    body = {"phone_number": number, "template": OTP}

    def attempt(_: int) -> tuple[int, Any]:
        response = gateway.send(body, **{"Idempotency-Key": f"burst-{number}"})
        return response.status_code, response.json()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(attempt, range(16)))
    accepted = {r["id"] for status, r in results if status == 201}
    assert len(accepted) == 1, results
    assert all(status == 201 or r["error"]["code"] == "idempotency_key_in_use" for status, r in results)
    upstream(gateway, number)
    assert len(gateway.sim.messages(to=number)) == 1


def test_single_sends_that_arrive_together_are_each_stored_and_sent_once(gateway: Gateway) -> None:
    """Single sends that share a commit are stored with shared statements (wagate.core.units.Mergeable): each
    request still gets its own message, to its own number (two to one number included), each goes
    out once, and a keyed one among them is remembered under its key."""
    numbers = [new_number() for _ in range(23)]
    numbers.append(numbers[0])  # two codes for one customer, in the same moment

    def attempt(n: int) -> tuple[int, Any]:
        keys = {"Idempotency-Key": f"together-{numbers[n]}-{n}"} if n % 4 == 0 else {}
        response = gateway.send({"phone_number": numbers[n], "template": OTP}, **keys)
        return response.status_code, response.json()

    with ThreadPoolExecutor(len(numbers)) as pool:
        with writes_held(gateway.database_url):
            answers = [pool.submit(attempt, n) for n in range(len(numbers))]
            time.sleep(1.0)  # every request is in: one batch waits on the lock, the rest queue behind it
        results = [answer.result() for answer in answers]
    assert all(status == 201 for status, _ in results), results
    ids = [body["id"] for _, body in results]
    assert len(set(ids)) == len(ids), "a message id given twice"
    for n, (_, body) in enumerate(results):
        assert gateway.message(body["id"])["phone_number"] == numbers[n]
        if n % 4 == 0:  # its key answers with the same message
            again = gateway.send(
                {"phone_number": numbers[n], "template": OTP},
                **{"Idempotency-Key": f"together-{numbers[n]}-{n}"},
            )
            assert again.json()["id"] == body["id"], again.text
    wait_for(
        lambda: all(len(gateway.sim.messages(to=n)) == numbers.count(n) for n in set(numbers)),
        what="each send at the simulator once",
    )
    # Each message's conversation is with its own number, one conversation per number.
    conversation_of = {}
    for n, message_id in enumerate(ids):
        [(number, conversation_id)] = sql(
            gateway.database_url,
            "SELECT c.phone_number, m.conversation_id FROM messages m"
            " JOIN conversations v ON v.id = m.conversation_id JOIN contacts c ON c.id = v.contact_id"
            " WHERE m.id = :id",
            id=message_id,
        )
        assert number == numbers[n]
        assert conversation_of.setdefault(number, conversation_id) == conversation_id
    assert len(set(conversation_of.values())) == len(set(numbers))
    # They were stored together: a batch's rows share its moment.
    created = Counter(
        sql(gateway.database_url, "SELECT created_at FROM messages WHERE id = :id", id=message_id)[0][0]
        for message_id in ids
    )
    assert max(created.values()) > 1, created
