"""A send has a route of its own (WagateApp hands `POST .../whatsapp/messages` without a query string
to `send_message_fast`, past FastAPI); with any query string FastAPI's route answers. Both must answer
every request alike: the same status and the same error body, the same idempotency rules."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from support.harness import Gateway, new_number

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
JSON = {"Content-Type": "application/json"}


def both(
    gateway: Gateway, content: bytes, headers: dict[str, str], account_id: int | None = None
) -> list[Any]:
    """The answers of the send's own route and of FastAPI's (`?dry_run=false`) to one request."""
    url = gateway.v1("/whatsapp/messages", account_id)
    return [
        gateway.http.post(target, content=content, headers=headers)
        for target in (url, url + "?dry_run=false")
    ]


def body_of(channel_id: int, **fields: Any) -> bytes:
    return httpx.Request("POST", "http://x", json={"channel_id": channel_id, **fields}).content


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("no key", 401),
        ("wrong scheme", 401),
        ("unknown key", 401),
        ("another account", 403),
        ("not JSON", 422),
        ("not UTF-8", 422),
        ("empty body", 422),
        ("a list", 422),
        ("a number of 5000 digits", 422),
        ("an integer beyond 64 bits", 422),
        ("channel_id as text", 422),
        ("two fields wrong", 422),
        ("neither number nor user id", 422),
        ("an unknown channel", 404),
        ("an invalid number", 422),
        ("an unknown template", 422),
    ],
)
def test_both_routes_refuse_alike(gateway: Gateway, case: str, status: int) -> None:
    main = gateway.ids["main"]
    number = new_number()
    headers = {**gateway.headers(), **JSON}
    account_id = None
    content = body_of(main, phone_number=number, template=OTP)
    if case == "no key":
        headers = JSON
    elif case == "wrong scheme":
        headers = {**JSON, "Authorization": headers["Authorization"].replace("Bearer", "Basic")}
    elif case == "unknown key":
        headers = {**JSON, "Authorization": "Bearer wg_live_not_a_key"}
    elif case == "another account":
        account_id = gateway.ids["acme"] + 1000
    elif case == "not JSON":
        content = b'{"channel_id": 1,'
    elif case == "not UTF-8":
        content = b'{"phone_number": "\xff\xfe"}'
    elif case == "empty body":
        content = b""
    elif case == "a list":
        content = b"[1, 2]"
    elif case == "a number of 5000 digits":
        content = b'{"channel_id": ' + b"9" * 5000 + b"}"
    elif case == "an integer beyond 64 bits":
        content = body_of(main, phone_number=number, template={**OTP, "parameters": [10**30]})
    elif case == "channel_id as text":
        content = body_of(main, phone_number=number, template=OTP).replace(
            f'"channel_id":{main}'.encode(), f'"channel_id":"{main}"'.encode()
        )
    elif case == "two fields wrong":
        content = body_of(main, phone_number=number, text="", conversation_status="closed")
    elif case == "neither number nor user id":
        content = body_of(main, template=OTP)
    elif case == "an unknown channel":
        content = body_of(999_999, phone_number=number, template=OTP)
    elif case == "an invalid number":
        content = body_of(main, phone_number="+1", template=OTP)
    elif case == "an unknown template":
        content = body_of(main, phone_number=number, template={**OTP, "name": "no_such_template"})
    fast, framework = both(gateway, content, headers, account_id)
    assert fast.status_code == status, (case, fast.text)
    assert (fast.status_code, fast.json()) == (framework.status_code, framework.json()), case
    assert gateway.sim.messages(to=number.lstrip("+")) == []  # nothing sent for a refused request


def test_both_routes_accept_alike_and_share_idempotency_keys(gateway: Gateway) -> None:
    number = new_number()
    key = str(uuid.uuid4())
    headers = {**gateway.headers(), **JSON, "Idempotency-Key": key}
    first, repeat = both(gateway, body_of(gateway.ids["main"], phone_number=number, template=OTP), headers)
    # The first request (the send's own route) stored the message; FastAPI's route, given the same
    # key and body, answers the first answer again and stores nothing.
    assert first.status_code == repeat.status_code == 201, (first.text, repeat.text)
    assert first.json() == repeat.json()
    assert first.json()["sent_as"] == "template"
    gateway.wait_status(first.json()["id"], "delivered")
    assert len(gateway.sim.messages(to=number.lstrip("+"))) == 1
    # Another body under the same key is refused on either route.
    other = body_of(gateway.ids["main"], phone_number=new_number(), template=OTP)
    for answer in both(gateway, other, headers):
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "idempotency_key_reused"
