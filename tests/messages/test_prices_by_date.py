"""Prices by date (API.md section 14), today, with the default price list, on both databases.

Since 2026-10-01 (Meta's announcement of 2026-07-01) a session message costs the utility rate, 0.036
AZN, as `SESSION`, and a UTILITY template inside the customer's window costs 0.036 too: in the message
object, the dry run, usage and the message list alike. A status's `pricing` stays authoritative.
The rules before that day, and a change of the list, are in test_prices_list_change.py.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx

from support.harness import MAIN, Gateway, change, new_number, post_meta, wait_for, webhook

ORDER = {"name": "order_update", "language": "en", "parameters": ["A-1", "shipped"]}
SESSION_COST = {"amount": "0.036", "currency": "AZN", "category": "SESSION"}


def customer_writes(gateway: Gateway, number: str) -> None:
    gateway.sim.inbound(MAIN["phone_number_id"], number, "Where is my order?")

    def window_open() -> bool:
        window = gateway.http.get(
            gateway.v1("/whatsapp/messages/window"),
            params={"channel_id": gateway.ids["main"], "phone_number": number},
            headers=gateway.headers(),
        ).json()
        return bool(window["open"])

    wait_for(window_open, what="the customer's window to open")


def dry_run(gateway: Gateway, body: dict[str, Any]) -> httpx.Response:
    return gateway.http.post(
        gateway.v1("/whatsapp/messages"),
        params={"dry_run": "true"},
        json={"channel_id": gateway.ids["main"], **body},
        headers=gateway.headers(),
    )


def usage_rows(gateway: Gateway) -> list[dict[str, Any]]:
    today = datetime.now(UTC).date().isoformat()
    response = gateway.http.get(
        f"{gateway.url}/v1/accounts/{gateway.ids['acme']}/usage",
        params={"from": today, "to": today, "channel_id": gateway.ids["main"]},
        headers=gateway.headers(),
    )
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()["data"]
    return rows


def sent(response: httpx.Response) -> str:
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    return message_id


def test_a_session_message_accepted_today_costs_the_utility_rate_as_session(gateway: Gateway) -> None:
    number = new_number()
    customer_writes(gateway, number)
    preview = dry_run(gateway, {"phone_number": number, "text": "It ships today."})
    assert preview.status_code == 200, preview.text
    assert preview.json()["sent_as"] == "session" and preview.json()["cost"] == SESSION_COST
    before = {row["category"]: row for row in usage_rows(gateway)}.get("SESSION")
    message_id = sent(gateway.send({"phone_number": number, "text": "It ships today."}))
    message = gateway.message(message_id)
    assert (message["sent_as"], message["cost"]) == ("session", SESSION_COST)
    # Meta's statuses (billable `service` since 2026-10-01) settle it at the same price.
    assert gateway.wait_status(message_id, "delivered")["cost"] == SESSION_COST
    listed = gateway.http.get(
        gateway.v1("/whatsapp/messages"), params={"phone_number": number}, headers=gateway.headers()
    ).json()["data"]
    assert [(m["id"], m["cost"]) for m in listed] == [(message_id, SESSION_COST)]
    after = {row["category"]: row for row in usage_rows(gateway)}["SESSION"]
    assert after["messages"] == (before["messages"] if before else 0) + 1
    assert Decimal(after["amount"]) == Decimal(before["amount"] if before else 0) + Decimal("0.036")


def test_a_utility_template_in_the_window_costs_its_price_today(gateway: Gateway) -> None:
    number = new_number()
    customer_writes(gateway, number)
    expected = {"amount": "0.036", "currency": "AZN", "category": "UTILITY"}
    assert dry_run(gateway, {"phone_number": number, "template": ORDER}).json()["cost"] == expected
    message_id = sent(gateway.send({"phone_number": number, "template": ORDER}))
    assert gateway.message(message_id)["cost"] == expected
    assert gateway.wait_status(message_id, "delivered")["cost"] == expected


def test_a_status_with_pricing_settles_a_session_message(gateway: Gateway) -> None:
    """`billable: false` makes it free (a free entry point); `service` billable charges the SESSION
    price of its acceptance day, with `cost.category` SESSION."""
    number = new_number()
    customer_writes(gateway, number)
    gateway.sim.configure(auto_statuses=False)
    try:
        message_id = sent(gateway.send({"phone_number": number, "text": "Here is your code."}))
        wamid = wait_for(lambda: gateway.message(message_id)["upstream_message_id"], what="its wamid")
    finally:
        gateway.sim.configure(auto_statuses=True)

    def status(kind: str, pricing: dict[str, Any]) -> None:
        item = {"id": wamid, "status": kind, "timestamp": str(int(time.time())), "recipient_id": number[1:]}
        assert (
            post_meta(gateway, webhook(change({"statuses": [{**item, "pricing": pricing}]}))).status_code
            == 200
        )

    status(
        "sent", {"billable": False, "pricing_model": "PMP", "type": "free_entry_point", "category": "service"}
    )
    free = wait_for(lambda: (m := gateway.message(message_id))["cost"]["amount"] == "0" and m, what="free")
    assert free["cost"] == {"amount": "0", "currency": "AZN", "category": "SESSION"}
    status("delivered", {"billable": True, "pricing_model": "PMP", "type": "regular", "category": "service"})
    charged = wait_for(
        lambda: (m := gateway.message(message_id))["status"] == "delivered" and m, what="delivered"
    )
    assert charged["cost"] == SESSION_COST
