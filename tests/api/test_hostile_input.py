"""Bad input is a clear 4xx in the contract's error body, never a 500, on SQLite and PostgreSQL alike.

Issue 9, item 5: ids beyond 64 bits, NUL and control characters, URLs that cannot be parsed or connected
to, a bulk recipient longer than its column, a non-ASCII verify token, JSON nested too deep and integers
of thousands of digits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from support.app_in_thread import running_gateway
from support.harness import MAIN, VERIFY_TOKEN, Gateway, Simulator, new_number, wait_for

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
HUGE = 10**30  # beyond 64 bits
PUBLIC_URL = "https://93.184.215.14/hooks/wa"  # a public address literal: no DNS needed, no traffic sent


def error_of(response: Any, status: int = 422, code: str = "invalid_request") -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    return error


def fields_of(error: dict[str, Any]) -> list[str]:
    return [d["field"] for d in error.get("details", [])]


# --- integers beyond 64 bits ---


@pytest.mark.parametrize("channel_id", [2**63, HUGE, -(2**64)])
def test_a_channel_id_beyond_64_bits_in_a_body_is_invalid_request(gateway: Gateway, channel_id: int) -> None:
    send = gateway.send({"channel_id": channel_id, "phone_number": new_number(), "template": OTP})
    assert fields_of(error_of(send)) == ["channel_id"]
    bulk = gateway.http.post(
        gateway.v1("/whatsapp/bulk_messages"),
        json={"channel_id": channel_id, "template": OTP, "phone_numbers": [new_number()]},
        headers=gateway.headers(),
    )
    assert fields_of(error_of(bulk)) == ["channel_id"]


@pytest.mark.parametrize("channel_id", [str(2**63), str(HUGE), "1" * 5000])
def test_a_channel_id_beyond_64_bits_in_a_query_is_invalid_request(gateway: Gateway, channel_id: str) -> None:
    window = gateway.http.get(
        gateway.v1("/whatsapp/messages/window"),
        params={"channel_id": channel_id, "phone_number": new_number()},
        headers=gateway.headers(),
    )
    assert fields_of(error_of(window)) == ["channel_id"]
    templates = gateway.http.get(
        gateway.v1("/whatsapp/templates"), params={"channel_id": channel_id}, headers=gateway.headers()
    )
    assert fields_of(error_of(templates)) == ["channel_id"]


def test_a_webhook_id_beyond_64_bits_is_invalid_request(gateway: Gateway) -> None:
    hook = gateway.v1(f"/webhooks/{HUGE}")
    for method, path, body in [
        ("DELETE", hook, None),
        ("PATCH", hook, {"enabled": True}),
        ("GET", f"{hook}/deliveries", None),
        ("POST", f"{hook}/deliveries/dlv_x/redeliver", None),
    ]:
        response = gateway.http.request(method, path, json=body, headers=gateway.headers())
        assert fields_of(error_of(response)) == ["webhook_id"], (method, path)


def test_an_account_id_beyond_64_bits_is_forbidden_like_any_unknown_account(gateway: Gateway) -> None:
    response = gateway.http.get(gateway.v1("/whatsapp/channels", HUGE), headers=gateway.headers())
    error_of(response, 403, "forbidden")


# --- NUL and control characters ---

BAD_CHARACTERS = ["\x00", "\x01", "\x1b", "\x1f"]


@pytest.mark.parametrize("bad", BAD_CHARACTERS)
@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b, c: {**b, "phone_number": "+99455" + c + "1234567"}, "phone_number"),
        (lambda b, c: {**b, "template": {**OTP, "name": "otp" + c}}, "template.name"),
        (lambda b, c: {**b, "template": {**OTP, "language": "e" + c}}, "template.language"),
        (lambda b, c: {**b, "template": {**OTP, "parameters": ["12" + c]}}, "template.parameters.0"),
        (lambda b, c: {**b, "template": {**OTP, "parameters": {"1": c}}}, "template.parameters.1"),
        (lambda b, c: {"phone_number": b["phone_number"], "text": "hi" + c}, "text"),
        (
            lambda b, c: {**b, "status_callback": {"url": PUBLIC_URL, "secret": "s" + c}},
            "status_callback.secret",
        ),
        (lambda b, c: {**b, "status_callback": {"url": PUBLIC_URL + c}}, "status_callback.url"),
        (lambda b, c: {**b, "conversation_status": "open" + c}, "conversation_status"),
    ],
)
def test_control_characters_in_a_send_are_invalid_request(
    gateway: Gateway, bad: str, change: Any, field: str
) -> None:
    number = new_number()
    response = gateway.send(change({"phone_number": number, "template": OTP}, bad))
    assert fields_of(error_of(response)) == [field]
    assert gateway.sim.messages(to=number) == []


@pytest.mark.parametrize("bad", ["\x00", "\x07"])
def test_control_characters_in_a_bulk_or_webhook_body_are_invalid_request(gateway: Gateway, bad: str) -> None:
    bulk = gateway.http.post(
        gateway.v1("/whatsapp/bulk_messages"),
        json={
            "channel_id": gateway.ids["main"],
            "template": OTP,
            "recipients": [{"phone_number": new_number()}, {"phone_number": "+99455" + bad}],
        },
        headers=gateway.headers(),
    )
    assert fields_of(error_of(bulk)) == ["recipients.1.phone_number"]
    hook = gateway.http.post(
        gateway.v1("/webhooks"), json={"url": PUBLIC_URL + bad}, headers=gateway.headers()
    )
    assert fields_of(error_of(hook)) == ["url"]


@pytest.mark.parametrize("bad", ["\x00", "\x02"])
def test_control_characters_in_a_path_or_query_are_invalid_request(gateway: Gateway, bad: str) -> None:
    # In an id of a message or a batch, a control character makes an id that cannot exist: 404.
    for path, status, code in [
        ("/whatsapp/messages/msg_" + quote(bad), 404, "message_not_found"),
        ("/whatsapp/messages/msg_" + quote(bad) + "/deliveries", 404, "message_not_found"),
        ("/whatsapp/bulk_messages/bat_" + quote(bad), 404, "batch_not_found"),
        ("/whatsapp/channels" + quote(bad), 422, "invalid_request"),
    ]:
        answer = gateway.http.get(gateway.v1(path), headers=gateway.headers())
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), path
    # Anywhere else in the path it is the request that is malformed.
    elsewhere = gateway.http.get(
        f"{gateway.url}/v1/accounts/1{quote(bad)}/whatsapp/messages/msg_1", headers=gateway.headers()
    )
    assert error_of(elsewhere)["details"][0]["field"] == "path"
    for params, field in [
        ({"channel_id": gateway.ids["main"], "phone_number": "+99455" + bad}, "phone_number"),
        ({"channel_id": gateway.ids["main"], "phone_number": new_number(), "x" + bad: "1"}, "x" + bad),
    ]:
        window = gateway.http.get(
            gateway.v1("/whatsapp/messages/window"), params=params, headers=gateway.headers()
        )
        assert fields_of(error_of(window)) == [field]
    for name in ("name", "language", "category", "status"):
        templates = gateway.http.get(
            gateway.v1("/whatsapp/templates"), params={name: "a" + bad}, headers=gateway.headers()
        )
        assert fields_of(error_of(templates)) == [name]


def test_tabs_and_newlines_are_ordinary_characters(open_gateway: Gateway) -> None:
    callback = {"url": "http://127.0.0.1:9/hook", "secret": "a\tb\r\nc"}
    response = open_gateway.send({"phone_number": new_number(), "template": OTP, "status_callback": callback})
    assert response.status_code == 201, response.text


# --- URLs that cannot be connected to, whatever WAGATE_ALLOW_PRIVATE_URLS says ---

BROKEN_URLS = [
    "https://93.184.215.14:99999/hook",
    "https://93.184.215.14:0/hook",
    "https://" + "a" * 64 + ".example.com/hook",
    "https://" + ".".join(["abcdefghij"] * 30) + "/hook",  # a host name over 253 characters
    "https://exa mple.com/hook",
    "https://[::1/hook",
    "https://example.com:80:80/hook",
    "https:///hook",
]


@pytest.fixture(scope="module")
def open_gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    """A deployment that allows private URLs: an invalid URL is still invalid."""
    with running_gateway(database_url, simulator, allow_private_urls=True) as running:
        yield running


@pytest.mark.parametrize("url", BROKEN_URLS)
def test_a_broken_callback_url_is_invalid_url(gateway: Gateway, open_gateway: Gateway, url: str) -> None:
    for running in (gateway, open_gateway):
        number = new_number()
        send = running.send({"phone_number": number, "template": OTP, "status_callback": {"url": url}})
        assert fields_of(error_of(send, code="invalid_url")) == ["status_callback.url"]
        assert running.sim.messages(to=number) == []
        hook = running.http.post(running.v1("/webhooks"), json={"url": url}, headers=running.headers())
        assert fields_of(error_of(hook, code="invalid_url")) == ["url"]


def test_private_urls_still_pass_where_the_deployment_allows_them(open_gateway: Gateway) -> None:
    url = "http://127.0.0.1:9/hook"
    send = open_gateway.send({"phone_number": new_number(), "template": OTP, "status_callback": {"url": url}})
    assert send.status_code == 201, send.text


# --- a bulk recipient longer than its column ---


def test_a_bulk_recipient_longer_than_the_column_is_rejected_and_the_rest_sent(gateway: Gateway) -> None:
    good = new_number()
    too_long = ["+" + "9" * 100, "1" * 5000, 10**18]
    response = gateway.http.post(
        gateway.v1("/whatsapp/bulk_messages"),
        json={"channel_id": gateway.ids["main"], "template": OTP, "phone_numbers": [good, *too_long]},
        headers=gateway.headers(),
    )
    assert response.status_code == 202, response.text
    assert response.json()["accepted"] == 1 and response.json()["rejected"] == 3
    batch = gateway.http.get(
        gateway.v1(f"/whatsapp/bulk_messages/{response.json()['batch_id']}"), headers=gateway.headers()
    ).json()
    statuses = [(r["status"], r["external_error"]) for r in batch["recipients"]]
    assert statuses[1:] == [("rejected", "invalid_phone_number")] * 3
    assert batch["recipients"][0]["phone_number"] == good
    assert batch["recipients"][2]["phone_number"].startswith("1111")


# --- Meta's verification handshake ---


@pytest.mark.parametrize("token", ["tökén", "😀", VERIFY_TOKEN + "é"])
def test_a_non_ascii_verify_token_is_403(gateway: Gateway, token: str) -> None:
    params = {"hub.mode": "subscribe", "hub.verify_token": token, "hub.challenge": "42"}
    response = gateway.http.get(f"{gateway.url}/webhooks/whatsapp", params=params)
    error_of(response, 403, "forbidden")


# --- JSON the parser refuses ---


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"channel_id": 1, "phone_number": "+994551234567", "template": {"name": "otp_code", '
        b'"language": "en", "parameters": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
        b'{"channel_id": ' + b"1" * 5000 + b"}",
        b'{"channel_id": 1, "phone_number": "+994551234567", "template": {"name": "otp_code", '
        b'"language": "en", "parameters": [' + b"7" * 5000 + b"]}}",
        b'{"channel_id": 1e999999}',
    ],
    ids=["deep", "deep-parameters", "long-integer", "long-integer-parameter", "huge-float"],
)
def test_json_the_parser_refuses_is_invalid_request(gateway: Gateway, raw: bytes) -> None:
    for path in ("/whatsapp/messages", "/whatsapp/bulk_messages", "/webhooks"):
        response = gateway.http.post(
            gateway.v1(path), content=raw, headers=gateway.headers(**{"Content-Type": "application/json"})
        )
        error = error_of(response)
        assert fields_of(error) in (["body"], ["channel_id"], ["template.parameters.0"], ["url"]), error


def test_json_nested_deeper_than_the_stores_take_is_invalid_request(gateway: Gateway) -> None:
    # A few hundred levels parse, but orjson (responses, the idempotency hash) writes at most 255.
    nested: Any = "x"
    for _ in range(300):
        nested = [nested]
    body = {"phone_number": new_number(), "template": {**OTP, "parameters": [nested]}}
    error = error_of(gateway.send(body, **{"Idempotency-Key": "deep-1"}))
    assert fields_of(error)[0].startswith("template.parameters.0.0.0")


def test_a_huge_integer_parameter_with_an_idempotency_key_is_not_a_500(gateway: Gateway) -> None:
    template = {**OTP, "parameters": [HUGE]}
    response = gateway.send(
        {"phone_number": new_number(), "template": template}, **{"Idempotency-Key": "huge-1"}
    )
    assert response.status_code == 422, response.text


# --- Meta's webhooks: signed, so taken, but their strings made storable ---


def test_a_customer_message_with_a_nul_is_stored_and_opens_the_window(gateway: Gateway) -> None:
    number = new_number()
    gateway.sim.inbound(MAIN["phone_number_id"], number.removeprefix("+"), "hi\x00there\x1b")
    wait_for(
        lambda: gateway.http.get(
            gateway.v1("/whatsapp/messages/window"),
            params={"channel_id": gateway.ids["main"], "phone_number": number},
            headers=gateway.headers(),
        ).json()["open"],
        what="the customer's message to open the window",
    )
