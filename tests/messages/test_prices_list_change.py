"""Prices by date (API.md section 14): the price list is a setting, and a message keeps the price of
its day. A gateway whose list says today is still before Meta's change prices session messages and
in-window utility templates at 0; restarted with the default list (today after the change), it leaves
those messages as they were and charges the new ones. Both databases, over HTTP.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from cryptography.fernet import Fernet

from support.app_in_thread import running_gateway
from support.harness import MAIN, Gateway, Simulator, new_number, wait_for

ORDER = {"name": "order_update", "language": "en", "parameters": ["A-1", "shipped"]}
RATES = {"AUTHENTICATION": "0.036", "UTILITY": "0.036", "MARKETING": "0.165"}


def before_the_change() -> list[dict[str, Any]]:
    """A list in which today is under the rules before 2026-10-01 and the change comes in two days."""
    today = datetime.now(UTC).date()
    return [
        {
            "from": (today - timedelta(days=30)).isoformat(),
            "prices": {**RATES, "SESSION": "0"},
            "utility_free_in_window": True,
        },
        {
            "from": (today + timedelta(days=2)).isoformat(),
            "prices": {**RATES, "SESSION": "0.036"},
            "utility_free_in_window": False,
        },
    ]


def sent(response: httpx.Response) -> str:
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    return message_id


def cost(gateway: Gateway, message_id: str) -> tuple[str, str]:
    found = gateway.message(message_id)["cost"]
    return found["amount"], found["category"]


def session_usage(gateway: Gateway) -> tuple[int, str]:
    today = datetime.now(UTC).date().isoformat()
    body = gateway.http.get(
        f"{gateway.url}/v1/accounts/{gateway.ids['acme']}/usage",
        params={"from": today, "to": today, "channel_id": gateway.ids["main"]},
        headers=gateway.headers(),
    ).json()
    [row] = [r for r in body["data"] if r["category"] == "SESSION"]
    return row["messages"], row["amount"]


def test_messages_keep_the_price_of_their_day_when_the_list_changes(
    database_url: str, simulator: Simulator
) -> None:
    key = Fernet.generate_key().decode()
    number, elsewhere = new_number(), new_number()
    # Meta's statuses as they were before 2026-10-01, so that they agree with the list.
    simulator.configure(pricing_date="2026-09-30")
    try:
        with running_gateway(database_url, simulator, secret_key=key, prices=before_the_change()) as first:
            simulator.inbound(MAIN["phone_number_id"], number, "Where is my order?")
            preview = wait_for(
                lambda: (
                    (
                        r := first.http.post(
                            first.v1("/whatsapp/messages"),
                            params={"dry_run": "true"},
                            json={"channel_id": first.ids["main"], "phone_number": number, "text": "Today."},
                            headers=first.headers(),
                        )
                    ).status_code
                    == 200
                    and r.json()
                ),
                what="the customer's window to open",
            )
            assert preview["cost"] == {"amount": "0", "currency": "AZN", "category": "SESSION"}
            session = sent(first.send({"phone_number": number, "text": "It ships today."}))
            in_window = sent(first.send({"phone_number": number, "template": ORDER}))
            outside = sent(first.send({"phone_number": elsewhere, "template": ORDER}))
            for message_id in (session, in_window, outside):
                first.wait_status(message_id, "delivered")
            assert cost(first, session) == ("0", "SESSION")
            assert cost(first, in_window) == ("0", "UTILITY")
            assert cost(first, outside) == ("0.036", "UTILITY")
            assert session_usage(first) == (1, "0")
    finally:
        simulator.configure(pricing_date=None)

    # The operator replaces the list (here: back to the default, where today is after the change).
    with running_gateway(database_url, simulator, secret_key=key) as second:
        assert cost(second, session) == ("0", "SESSION")
        assert cost(second, in_window) == ("0", "UTILITY")
        assert cost(second, outside) == ("0.036", "UTILITY")
        later = sent(second.send({"phone_number": number, "text": "On its way."}))
        assert cost(second, later) == ("0.036", "SESSION")
        assert cost(second, second.wait_status(later, "delivered")["id"]) == ("0.036", "SESSION")
        assert session_usage(second) == (2, "0.036")
