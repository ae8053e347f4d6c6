"""API.md section 13: Meta's formats of 2026, end to end over HTTP with the simulator, on both databases.

Customers known by business-scoped user id (BSUID) and username, batched webhooks with odd items,
sends by user id, marketing preferences, and costs as Meta charges them.
"""

from __future__ import annotations

import time
from typing import Any

from support.app_in_thread import sql
from support.harness import (
    MAIN,
    Gateway,
    change,
    marketing_preference,
    new_number,
    post_meta,
    sim_customer,
    wait_for,
    webhook,
    window,
)

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
SALE = {"name": "spring_sale", "language": "en", "parameters": ["20%", "20%", "spring"]}
ORDER = {"name": "order_update", "language": "en", "parameters": ["A-1", "shipped"]}


def inbound(gateway: Gateway, **body: Any) -> None:
    gateway.sim.http.post(
        f"{gateway.sim.url}/_sim/inbound",
        json={"phone_number_id": MAIN["phone_number_id"], "text": "hello", **body},
    ).raise_for_status()


def conversation_status(gateway: Gateway, message_id: str) -> str:
    status: str = gateway.message(message_id)["conversation"]["status"]
    return status


def test_a_username_reply_reopens_the_conversation_an_api_send_resolved(gateway: Gateway) -> None:
    number = new_number()
    sent = gateway.otp(number)
    assert sent.status_code == 201
    message_id = sent.json()["id"]
    # The statuses of the send carry the customer's user id beside the number: the gateway learns it.
    user_id = sim_customer(gateway, phone_number=number)["user_id"]
    learned = wait_for(lambda: (m := gateway.message(message_id))["user_id"] and m, what="user id learned")
    assert learned["user_id"] == user_id and learned["phone_number"] == number
    assert conversation_status(gateway, message_id) == "resolved"
    assert window(gateway, number)["open"] is False

    # The customer adopts a username: Meta hides the number, the reply has no `from` and no `wa_id`.
    sim_customer(gateway, phone_number=number, username="aysel.m")
    inbound(gateway, user_id=user_id, name="Aysel")
    wait_for(lambda: conversation_status(gateway, message_id) == "open", what="conversation to reopen")
    assert window(gateway, number)["open"] is True
    # The reply sits in the number's conversation, with the number the gateway learned.
    [(phone, stored_user_id, text)] = sql(
        gateway.database_url,
        "SELECT phone_number, user_id, text FROM messages"
        " WHERE direction = 'inbound' AND conversation_id = :c",
        c=learned["conversation"]["id"],
    )
    assert (phone, stored_user_id, text) == (number, user_id, "hello")
    [(username, name)] = sql(
        gateway.database_url,
        "SELECT username, name FROM contacts WHERE phone_number = :n",
        n=number,
    )
    assert (username, name) == ("aysel.m", "Aysel")


def test_a_user_id_never_seen_is_a_customer_of_its_own_reached_by_user_id(gateway: Gateway) -> None:
    stranger = "AZ.7" + str(time.time_ns())[-19:]
    inbound(gateway, user_id=stranger, username="stranger", text="who are you?")
    wait_for(
        lambda: sql(gateway.database_url, "SELECT 1 FROM customer_ids WHERE user_id = :u", u=stranger),
        what="the customer to be stored",
    )
    # Their window is open: text goes as a session message, addressed to the user id.
    reply = gateway.send({"user_id": stranger, "text": "We are the shop."})
    assert reply.status_code == 201, reply.text
    assert reply.json()["sent_as"] == "session"
    message = gateway.message(reply.json()["id"])
    assert (message["phone_number"], message["user_id"]) == (None, stranger)
    assert message["cost"]["amount"] == "0.036"  # a session message, since 2026-10-01
    [request] = wait_for(
        lambda: [m for m in gateway.sim.messages() if m["body"].get("recipient") == stranger] or None,
        what="the send to reach the simulator",
    )
    assert "to" not in request["body"]
    gateway.wait_status(message["id"], "delivered")
    # The reply and the customer's message are one conversation.
    [(conversations,)] = sql(
        gateway.database_url,
        "SELECT COUNT(DISTINCT conversation_id) FROM messages WHERE user_id = :u",
        u=stranger,
    )
    assert conversations == 1


def test_a_send_by_user_id_uses_the_window_of_its_number(gateway: Gateway) -> None:
    number = new_number()
    inbound(gateway, **{"from": number})  # the contact beside the message carries the user id
    wait_for(lambda: window(gateway, number)["open"], what="window to open")
    user_id = sim_customer(gateway, phone_number=number)["user_id"]
    reply = gateway.send({"user_id": user_id, "text": "Thanks for writing"})
    assert reply.status_code == 201, reply.text
    assert reply.json()["sent_as"] == "session"  # the number's window is open
    message = gateway.message(reply.json()["id"])
    assert (message["phone_number"], message["user_id"]) == (number, user_id)
    [first] = sql(
        gateway.database_url,
        "SELECT conversation_id FROM messages WHERE direction = 'inbound' AND phone_number = :n",
        n=number,
    )
    assert message["conversation"]["id"] == first[0]
    # A user id nobody has seen has no window: text without a fallback is refused, as for a number.
    unknown = gateway.send({"user_id": "AZ.99999999999999999999", "text": "hi"})
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "window_closed"


def test_a_batched_post_with_one_odd_item_applies_the_rest(gateway: Gateway) -> None:
    gateway.sim.configure(auto_statuses=False)
    try:
        number, other = new_number(), new_number()
        first, second = gateway.otp(number).json()["id"], gateway.otp(other).json()["id"]
        wamids = [
            wait_for(lambda m=m: gateway.message(m)["upstream_message_id"], what="wamid")
            for m in (first, second)
        ]
        now = str(int(time.time()))
        body = webhook(
            change(
                {
                    "contacts": [{"wa_id": number.lstrip("+"), "user_id": "AZ.1" + number[-10:]}],
                    "statuses": [
                        {
                            "id": wamids[0],
                            "status": "delivered",
                            "timestamp": now,
                            "recipient_id": number[1:],
                        },
                        {"id": "wamid.broken", "status": "read"},  # no timestamp: odd
                    ],
                }
            ),
            change({"statuses": [{"id": "wamid.x", "status": "sent", "timestamp": now}]}, number_id="999"),
            change(
                {
                    "statuses": [
                        {"id": wamids[1], "status": "read", "timestamp": now, "recipient_id": other[1:]}
                    ]
                }
            ),
        )
        response = post_meta(gateway, body)
        assert response.status_code == 200
        gateway.wait_status(first, "delivered")
        gateway.wait_status(second, "read")
        assert gateway.message(first)["user_id"] == "AZ.1" + number[-10:]
        letters = sql(gateway.database_url, "SELECT kind, reference, error FROM dead_letters ORDER BY id")
        odd = [(kind, reference, error) for kind, reference, error in letters if kind == "meta_webhook_item"]
        assert (
            "meta_webhook_item",
            MAIN["phone_number_id"],
            "statuses[].timestamp must be Unix seconds",
        ) in odd
        assert ("meta_webhook_item", "999", "no channel has phone number id 999") in odd
    finally:
        gateway.sim.configure(auto_statuses=True)


def test_a_customer_who_stopped_marketing_gets_no_marketing_template(gateway: Gateway) -> None:
    number, other = new_number(), new_number()
    now = int(time.time())
    marketing_preference(gateway, number, "stop", now)

    def refused() -> Any:
        response = gateway.send({"phone_number": number, "template": SALE})
        return response if response.status_code == 422 else None

    response = wait_for(refused, what="the stop to be applied")
    assert response.json()["error"]["code"] == "marketing_preference_stopped"
    # Utility and authentication templates still go.
    assert gateway.send({"phone_number": number, "template": ORDER}).status_code == 201
    assert gateway.otp(number).status_code == 201
    # In a batch, that recipient is rejected and the others go.
    batch = gateway.http.post(
        gateway.v1("/whatsapp/bulk_messages"),
        json={"channel_id": gateway.ids["main"], "template": SALE, "phone_numbers": [number, other]},
        headers=gateway.headers(),
    )
    assert batch.status_code == 202, batch.text
    assert (batch.json()["accepted"], batch.json()["rejected"]) == (1, 1)
    report = gateway.http.get(
        gateway.v1(f"/whatsapp/bulk_messages/{batch.json()['batch_id']}"), headers=gateway.headers()
    ).json()
    rejected = {r["phone_number"]: r for r in report["recipients"]}[number]
    assert rejected["status"] == "rejected" and rejected["external_error"] == "marketing_preference_stopped"
    # An older choice delivered late changes nothing; `resume` lifts the stop.
    marketing_preference(gateway, number, "resume", now - 60)
    time.sleep(0.5)
    assert gateway.send({"phone_number": number, "template": SALE}).status_code == 422
    marketing_preference(gateway, number, "resume", now + 1)
    wait_for(
        lambda: gateway.send({"phone_number": number, "template": SALE}).status_code == 201,
        what="the resume to be applied",
    )


def test_a_utility_template_in_an_open_window_costs_its_price_since_october_2026(gateway: Gateway) -> None:
    # Free until 2026-09-30 (tests/messages/test_prices_by_date.py prices by a list of that time).
    number, closed = new_number(), new_number()
    inbound(gateway, **{"from": number})
    wait_for(lambda: window(gateway, number)["open"], what="window to open")
    in_window = gateway.send({"phone_number": number, "template": ORDER}).json()["id"]
    paid = gateway.send({"phone_number": closed, "template": ORDER}).json()["id"]
    assert gateway.message(in_window)["cost"] == {"amount": "0.036", "currency": "AZN", "category": "UTILITY"}
    assert gateway.message(paid)["cost"]["amount"] == "0.036"
    # Meta's pricing on the statuses agrees (billable in the window too), and the cost stays settled.
    assert gateway.wait_status(in_window, "delivered")["cost"]["amount"] == "0.036"
    assert gateway.wait_status(paid, "delivered")["cost"]["amount"] == "0.036"


def test_the_pricing_of_a_status_settles_the_cost(gateway: Gateway) -> None:
    gateway.sim.configure(auto_statuses=False)
    try:
        number, other = new_number(), new_number()
        waived, recategorised = (
            gateway.otp(number).json()["id"],
            gateway.send({"phone_number": other, "template": ORDER}).json()["id"],
        )
        wamids = [
            wait_for(lambda m=m: gateway.message(m)["upstream_message_id"], what="wamid")
            for m in (waived, recategorised)
        ]
        now = str(int(time.time()))
        free = {
            "billable": False,
            "pricing_model": "PMP",
            "type": "free_entry_point",
            "category": "authentication",
        }
        marketing = {"billable": True, "pricing_model": "PMP", "type": "regular", "category": "marketing"}
        body = webhook(
            change(
                {
                    "statuses": [
                        {
                            "id": wamids[0],
                            "status": "sent",
                            "timestamp": now,
                            "recipient_id": number[1:],
                            "pricing": free,
                        },
                        {
                            "id": wamids[1],
                            "status": "sent",
                            "timestamp": now,
                            "recipient_id": other[1:],
                            "pricing": marketing,
                        },
                    ]
                }
            )
        )
        assert post_meta(gateway, body).status_code == 200
        wait_for(lambda: gateway.message(waived)["cost"]["amount"] == "0", what="the free send to cost 0")
        settled = wait_for(
            lambda: (m := gateway.message(recategorised))["cost"]["category"] == "MARKETING" and m,
            what="the recategorised send",
        )
        assert settled["cost"]["amount"] == "0.165"
        assert settled["template"]["category"] == "UTILITY"  # the template is what it was
    finally:
        gateway.sim.configure(auto_statuses=True)
