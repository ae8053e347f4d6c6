"""Helpers for the simulator's tests about customers, sends by user id and batched statuses."""

from __future__ import annotations

import re
from typing import Any

import httpx
from sim_harness import PHONE_NUMBER_ID, Harness

TO = "994501234567"
USER_ID = re.compile(r"[A-Z]{2}\.[0-9]{20}")


def customer(harness: Harness, **params: str) -> dict[str, Any]:
    found: dict[str, Any] = harness.control(
        "GET", "/_sim/customers", params={"phone_number_id": PHONE_NUMBER_ID, **params}
    )
    return found


def set_customer(harness: Harness, **body: Any) -> dict[str, Any]:
    changed: dict[str, Any] = harness.control(
        "POST", "/_sim/customers", json={"phone_number_id": PHONE_NUMBER_ID, **body}
    )
    return changed


def user_id_of(harness: Harness, number: str = TO, phone_number_id: str = PHONE_NUMBER_ID) -> str:
    found = harness.control(
        "GET", "/_sim/customers", params={"phone_number_id": phone_number_id, "phone_number": number}
    )
    return str(found["user_id"])


def values(harness: Harness) -> list[dict[str, Any]]:
    return [
        change["value"]
        for body in harness.receiver.snapshot()
        for entry in body["entry"]
        for change in entry["changes"]
    ]


def status_values(harness: Harness, wamid: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(status, the contact beside it) for each status of ``wamid``, in the order they arrived."""
    found = []
    for value in values(harness):
        for index, status in enumerate(value.get("statuses", [])):
            if status["id"] == wamid:
                found.append((status, value["contacts"][index]))
    return found


def send(harness: Harness, **addressee: str) -> httpx.Response:
    body = {"messaging_product": "whatsapp", "type": "text", "text": {"body": "hi"}, **addressee}
    return harness.send(body)


def wamid_of(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return str(response.json()["messages"][0]["id"])
