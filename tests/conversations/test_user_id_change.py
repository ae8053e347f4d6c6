"""API.md section 14, user id changes, over HTTP with the simulator on both databases: Meta's
`user_changed_user_id` system message moves the customer to the new user id. They stay one customer
(one conversation, the window as it was), the notice renews no window and is not the customer's
words, and a send by the old id reaches Meta addressed to the new one."""

from __future__ import annotations

import time
from typing import Any

from support.app_in_thread import sql
from support.harness import (
    MAIN,
    Gateway,
    change,
    new_number,
    post_meta,
    sim_customer,
    wait_for,
    webhook,
    window,
)


def inbound(gateway: Gateway, **body: Any) -> str:
    response = gateway.sim.http.post(
        f"{gateway.sim.url}/_sim/inbound",
        json={"phone_number_id": MAIN["phone_number_id"], "text": "hello", **body},
    )
    response.raise_for_status()
    wamid: str = response.json()["wamid"]
    return wamid


def contact_of_user_id(gateway: Gateway, user_id: str) -> int | None:
    rows = sql(gateway.database_url, "SELECT contact_id FROM customer_ids WHERE user_id = :u", u=user_id)
    return rows[0][0] if rows else None


def conversations_of(gateway: Gateway, contact_id: int) -> list[tuple[Any, ...]]:
    return sql(
        gateway.database_url,
        "SELECT id, status FROM conversations WHERE contact_id = :c AND channel_id = :ch",
        c=contact_id,
        ch=gateway.ids["main"],
    )


def test_a_user_id_change_keeps_one_customer_and_sends_by_the_old_id_go_to_the_new(gateway: Gateway) -> None:
    number = new_number()
    inbound(gateway, **{"from": number})
    opened = wait_for(lambda: (w := window(gateway, number))["open"] and w, what="the window to open")
    old = sim_customer(gateway, phone_number=number)["user_id"]
    contact = wait_for(lambda: contact_of_user_id(gateway, old), what="the user id learned")
    [(conversation_id, _)] = conversations_of(gateway, contact)

    changed = gateway.sim.http.post(
        f"{gateway.sim.url}/_sim/user_id_change",
        json={"phone_number_id": MAIN["phone_number_id"], "phone_number": number},
    )
    assert changed.status_code == 200, changed.text
    new = changed.json()["user_id"]
    assert changed.json()["previous_user_id"] == old and new != old
    assert sim_customer(gateway, phone_number=number)["user_id"] == new  # the simulator knows the new id

    # The new id names the same customer: one contact, one conversation, the window as it was (the
    # notice is not a customer message and renews nothing).
    assert wait_for(lambda: contact_of_user_id(gateway, new), what="the new user id") == contact
    assert conversations_of(gateway, contact) == [(conversation_id, "open")]
    after = window(gateway, number)
    assert after["open"] is True
    assert (after["last_customer_message_at"], after["expires_at"]) == (
        opened["last_customer_message_at"],
        opened["expires_at"],
    )
    notes = sql(
        gateway.database_url,
        "SELECT direction, text, user_id FROM messages WHERE conversation_id = :c AND direction <> 'inbound'",
        c=conversation_id,
    )
    assert notes == [("system", "User changed their WhatsApp user id", new)]

    # A send by the old id: the customer's window, their conversation, addressed to the new id.
    reply = gateway.send({"user_id": old, "text": "We got your message"})
    assert reply.status_code == 201, reply.text
    assert reply.json()["sent_as"] == "session"
    message = gateway.message(reply.json()["id"])
    assert message["conversation"]["id"] == conversation_id
    assert (message["phone_number"], message["user_id"]) == (number, new)
    [request] = wait_for(
        lambda: [m for m in gateway.sim.messages() if m["body"].get("recipient") == new] or None,
        what="the send to reach the simulator",
    )
    assert "to" not in request["body"]
    gateway.wait_status(message["id"], "delivered")

    # The customer writes under the new id: the same conversation.
    inbound(gateway, user_id=new, text="Thanks")
    wait_for(
        lambda: (
            sql(gateway.database_url, "SELECT conversation_id FROM messages WHERE text = 'Thanks'")
            == [(conversation_id,)]
        ),
        what="the reply in the same conversation",
    )
    assert len(conversations_of(gateway, contact)) == 1


def system_message(previous: str, current: str, at: int) -> dict[str, Any]:
    wamid = f"wamid.sys{previous}{current}".replace(".", "")
    item = {
        "from_user_id": previous,
        "id": wamid,
        "timestamp": str(at),
        "type": "system",
        "system": {
            "body": "User's WhatsApp user ID changed",
            "type": "user_changed_user_id",
            "user_id": current,
            "previous_user_id": previous,
        },
    }
    return webhook(change({"messages": [item]}))


def test_a_new_id_that_wrote_first_is_merged_into_the_customer(gateway: Gateway) -> None:
    number = new_number()
    inbound(gateway, **{"from": number}, text="first, by number")
    old = sim_customer(gateway, phone_number=number)["user_id"]
    contact = wait_for(lambda: contact_of_user_id(gateway, old), what="the user id learned")
    [(kept, _)] = conversations_of(gateway, contact)
    # The customer wrote under their new id before Meta's notice came: a customer of its own.
    new = "AZ.8" + str(time.time_ns())[-19:]
    inbound(gateway, user_id=new, username="later.me", text="second, by the new id")
    stranger = wait_for(lambda: contact_of_user_id(gateway, new), what="the new id's customer")
    assert stranger != contact
    [(absorbed, _)] = conversations_of(gateway, stranger)

    assert post_meta(gateway, system_message(old, new, int(time.time()))).status_code == 200
    wait_for(lambda: contact_of_user_id(gateway, new) == contact, what="the customers merged")
    # One customer, one conversation holding both messages; the other is gone.
    assert conversations_of(gateway, contact) == [(kept, "open")]
    assert sql(gateway.database_url, "SELECT 1 FROM conversations WHERE id = :c", c=absorbed) == []
    assert sql(gateway.database_url, "SELECT 1 FROM contacts WHERE id = :c", c=stranger) == []
    texts = sql(
        gateway.database_url,
        "SELECT text FROM messages WHERE conversation_id = :c AND direction = 'inbound'",
        c=kept,
    )
    assert sorted(t for (t,) in texts) == ["first, by number", "second, by the new id"]
    [(username,)] = sql(gateway.database_url, "SELECT username FROM contacts WHERE id = :c", c=contact)
    assert username == "later.me"
    # Sends by either id reach the customer by the new one, in the one conversation.
    for user_id in (old, new):
        reply = gateway.send({"user_id": user_id, "text": "Noted"})
        assert reply.status_code == 201, reply.text
        message = gateway.message(reply.json()["id"])
        assert (message["user_id"], message["conversation"]["id"]) == (new, kept)
    # Delivered twice by Meta: applied once.
    assert post_meta(gateway, system_message(old, new, int(time.time()))).status_code == 200
    time.sleep(0.3)
    [(notes,)] = sql(
        gateway.database_url,
        "SELECT COUNT(*) FROM messages WHERE conversation_id = :c AND direction = 'system'",
        c=kept,
    )
    assert notes == 1


def test_a_change_for_an_unknown_customer_stores_nothing(gateway: Gateway) -> None:
    previous, current = "AZ.5" + str(time.time_ns())[-19:], "AZ.6" + str(time.time_ns())[-19:]
    assert post_meta(gateway, system_message(previous, current, int(time.time()))).status_code == 200
    time.sleep(0.5)
    assert contact_of_user_id(gateway, current) is None
    assert sql(gateway.database_url, "SELECT 1 FROM messages WHERE user_id = :u", u=current) == []
