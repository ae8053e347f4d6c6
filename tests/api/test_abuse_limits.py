"""Abuse limits (issue 14, points 1 and 4): a per-API-key request rate, slow clients, and the sizes of a
request's head, path, query and template values, each refused with the contract's error body naming
the limit. Heads and slow clients are spoken over raw sockets: the point is what the server does while
a client is still sending."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from support.app_in_thread import running_gateway
from support.harness import ADMIN_TOKEN, AGENT_TOKEN, Gateway, Simulator, new_number, signed_in

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}


@pytest.fixture(scope="module")
def strict_gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    """Tight limits, so that a test reaches them quickly."""
    with running_gateway(
        database_url,
        simulator,
        api_key_requests_per_second=2,
        api_key_burst=5,
        header_timeout_seconds=1.0,
        body_timeout_seconds=1.0,
        max_header_bytes=4096,
    ) as running:
        yield running


def windows_path(gateway: Gateway) -> str:
    return f"/v1/accounts/{gateway.ids['acme']}/whatsapp/messages/window"


def window_query(gateway: Gateway) -> dict[str, Any]:
    return {"channel_id": gateway.ids["main"], "phone_number": new_number()}


def error_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return error


# --- the rate of one API key ---


def test_a_key_past_its_rate_gets_429_with_retry_after_and_others_are_untouched(
    strict_gateway: Gateway,
) -> None:
    gateway = strict_gateway
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    answers = [
        gateway.http.get(gateway.url + windows_path(gateway), params=window_query(gateway), headers=admin)
        for _ in range(8)
    ]
    statuses = [a.status_code for a in answers]
    assert statuses[:5] == [200] * 5, statuses  # the burst
    refused = [a for a in answers if a.status_code == 429]
    assert refused, statuses
    error = error_of(refused[0], 429, "rate_limited")
    assert "at most 2 a second" in error["message"] and "bursts of 5" in error["message"], error
    assert int(refused[0].headers["retry-after"]) >= 1

    # Another key of the same account is counted on its own.
    agent = {"Authorization": f"Bearer {AGENT_TOKEN}"}
    other = gateway.http.get(gateway.url + windows_path(gateway), params=window_query(gateway), headers=agent)
    assert other.status_code == 200, other.text

    # Nothing refused was done: a refused send stores nothing.
    number = new_number()
    body = {"channel_id": gateway.ids["main"], "phone_number": number, "template": OTP}
    send = gateway.http.post(gateway.v1("/whatsapp/messages"), json=body, headers=admin)
    assert send.status_code == 429
    assert gateway.sim.messages(to=number) == []

    # After Retry-After the key works again.
    time.sleep(int(refused[0].headers["retry-after"]) + 0.1)
    again = gateway.http.get(gateway.url + windows_path(gateway), params=window_query(gateway), headers=admin)
    assert again.status_code == 200, again.text


def test_the_default_rate_leaves_normal_use_alone(gateway: Gateway) -> None:
    """300 requests as fast as one client sends them, on the default settings: none refused."""
    statuses = {
        gateway.http.get(
            gateway.url + windows_path(gateway), params=window_query(gateway), headers=gateway.headers()
        ).status_code
        for _ in range(300)
    }
    assert statuses == {200}


# --- heads, paths and queries ---


def raw_exchange(
    gateway: Gateway, request: bytes, *, pause_after: float = 0.0, read_for: float = 5.0
) -> bytes:
    """Send `request` (then wait `pause_after`), and read what the server answers until it closes."""
    parts = urlsplit(gateway.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=read_for) as sock:
        if request:
            sock.sendall(request)
        if pause_after:
            time.sleep(pause_after)
        answer = b""
        deadline = time.monotonic() + read_for
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            answer += chunk
        return answer


def status_and_error(answer: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"connection: close" in head.lower(), head
    error: dict[str, Any] = orjson.loads(body)["error"]
    return status, error


def test_headers_past_the_limit_get_431_naming_it(strict_gateway: Gateway) -> None:
    big = b"X-Padding: " + b"a" * 5000 + b"\r\n"
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n"
    status, error = status_and_error(raw_exchange(strict_gateway, request))
    assert status == 431 and error["code"] == "headers_too_large", error
    assert "4096 bytes" in error["message"]


def test_an_endless_head_is_cut_off_while_it_streams_in(strict_gateway: Gateway) -> None:
    """A head that never ends: refused once past the limit, not held until it ends."""
    parts = urlsplit(strict_gateway.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: ")
        sent = 0
        try:
            while sent < 10 * 1024 * 1024 and not select.select([sock], [], [], 0)[0]:
                sock.sendall(b"a" * 1024)
                sent += 1024
        except (BrokenPipeError, ConnectionResetError):
            pass
        # The answer came while the header was still streaming in, long before its 10 MiB (what the
        # client got out includes the kernel's socket buffers, a few MiB on loopback).
        assert sent < 10 * 1024 * 1024, f"the server read {sent} bytes of one header"
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    if answer:  # the client may see the reset before the answer; when it sees the answer, it is 431
        status, error = status_and_error(answer)
        assert status == 431, error


def test_a_head_sent_too_slowly_gets_408(strict_gateway: Gateway) -> None:
    started = time.monotonic()
    answer = raw_exchange(strict_gateway, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    status, error = status_and_error(answer)
    assert status == 408 and error["code"] == "request_timeout", error
    assert "within 1 seconds" in error["message"]
    assert time.monotonic() - started < 4


def test_a_later_head_sent_too_slowly_on_a_kept_connection_gets_408(strict_gateway: Gateway) -> None:
    """The head's clock runs for every request of a connection, not only its first (a head that
    arrives whole needs no timer, so one that stops halfway must start one)."""
    parts = urlsplit(strict_gateway.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5.0) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while not first.endswith(b"}"):  # the whole answer of /healthz, a JSON object
            chunk = sock.recv(65536)
            assert chunk, f"the server closed the connection after {first!r}"
            first += chunk
        assert first.startswith(b"HTTP/1.1 200"), first
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status, error = status_and_error(answer)
    assert status == 408 and error["code"] == "request_timeout", error
    assert 0.9 < time.monotonic() - started < 4


def test_a_connection_that_sends_nothing_is_closed(strict_gateway: Gateway) -> None:
    started = time.monotonic()
    answer = raw_exchange(strict_gateway, b"")
    status, _ = status_and_error(answer)
    assert status == 408
    assert time.monotonic() - started < 4


def test_a_body_sent_too_slowly_gets_408_and_nothing_is_stored(strict_gateway: Gateway) -> None:
    gateway = strict_gateway
    number = new_number()
    body = orjson.dumps({"channel_id": gateway.ids["main"], "phone_number": number, "template": OTP})
    path = f"/v1/accounts/{gateway.ids['acme']}/whatsapp/messages"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {AGENT_TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    answer = raw_exchange(gateway, head + body[:10])
    status, error = status_and_error(answer)
    assert status == 408 and error["code"] == "request_timeout", error
    assert "body did not arrive within 1 seconds" in error["message"]
    assert gateway.sim.messages(to=number) == []


def test_a_slow_client_does_not_hold_up_others(strict_gateway: Gateway) -> None:
    """Twenty connections trickling their heads: a normal request is answered at once meanwhile."""
    parts = urlsplit(strict_gateway.url)
    trickling = [socket.create_connection((parts.hostname, parts.port), timeout=5) for _ in range(20)]
    try:
        for sock in trickling:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        response = strict_gateway.http.get(f"{strict_gateway.url}/healthz", timeout=2)
        assert response.status_code == 200
    finally:
        for sock in trickling:
            sock.close()


@pytest.mark.parametrize(
    ("query", "issue"),
    [
        ("&".join(f"p{i}=1" for i in range(60)), "more than 50 parameters"),
        ("phone_number=" + "1" * 3000, "longer than 2048 characters"),
        ("x=" + "a" * 9000, "longer than 8192 characters"),
    ],
)
def test_queries_past_their_limits_get_422_naming_them(gateway: Gateway, query: str, issue: str) -> None:
    response = gateway.http.get(f"{gateway.url}{windows_path(gateway)}?{query}", headers=gateway.headers())
    error = error_of(response, 422, "invalid_request")
    assert issue in error["message"], error


def test_a_path_past_its_limit_gets_422(gateway: Gateway) -> None:
    response = gateway.http.get(f"{gateway.url}/v1/{'a' * 3000}", headers=gateway.headers())
    error = error_of(response, 422, "invalid_request")
    assert "longer than 2048 characters" in error["message"], error


def test_an_id_that_cannot_exist_is_not_found_after_the_key_is_checked(gateway: Gateway) -> None:
    # Spec section 4.5: "404 when the id is wrong", however wrong; the guard's limits still hold.
    long_id = "msg_" + "a" * 3000
    found = gateway.http.get(gateway.v1(f"/whatsapp/messages/{long_id}"), headers=gateway.headers())
    assert error_of(found, 404, "message_not_found")
    batch = gateway.http.get(
        gateway.v1(f"/whatsapp/bulk_messages/bat_{'b' * 3000}"), headers=gateway.headers()
    )
    assert error_of(batch, 404, "batch_not_found")
    # Without a key, or for another account, the same answers as for any id.
    anonymous = gateway.http.get(gateway.v1(f"/whatsapp/messages/{long_id}"))
    assert error_of(anonymous, 401, "unauthorized")
    other = gateway.http.get(
        gateway.v1(f"/whatsapp/messages/{long_id}", account_id=999), headers=gateway.headers()
    )
    assert error_of(other, 403, "forbidden")


def test_a_template_value_longer_than_a_body_can_hold_is_refused(gateway: Gateway) -> None:
    number = new_number()
    otp = {"name": "otp_code", "language": "en", "parameters": ["1" * 1025]}
    body = {"channel_id": gateway.ids["main"], "phone_number": number, "template": otp}
    response = gateway.http.post(gateway.v1("/whatsapp/messages"), json=body, headers=gateway.headers())
    assert response.status_code == 422, response.text
    assert "longer than 1024 characters" in response.json()["error"]["message"]
    assert gateway.sim.messages(to=number) == []


# --- ids past their columns ---


def test_ids_past_32_bits_are_refused_not_a_database_error(gateway: Gateway) -> None:
    """Accounts, channels, webhooks and conversations have 32-bit keys: PostgreSQL refuses a larger
    parameter for them, which must be the caller's 422, not the server's 500."""
    big = 2**40
    body = {"channel_id": big, "phone_number": new_number(), "template": OTP}
    send = gateway.http.post(gateway.v1("/whatsapp/messages"), json=body, headers=gateway.headers())
    error = error_of(send, 422, "invalid_request")
    assert "2147483647" in error["message"], error
    hook = gateway.http.delete(gateway.v1(f"/webhooks/{big}"), headers=gateway.headers())
    error_of(hook, 422, "invalid_request")
    window = gateway.http.get(
        gateway.v1("/whatsapp/messages/window"),
        params={"channel_id": big, "phone_number": new_number()},
        headers=gateway.headers(),
    )
    error_of(window, 422, "invalid_request")
    with signed_in(gateway) as dashboard:
        for path in (f"/conversations/{big}", f"/messages?channel={big}", f"/conversations?inbox={big}"):
            page = dashboard.get(path)
            assert 400 <= page.status_code < 500, (path, page.status_code)
        assert dashboard.get(f"/conversations?before=2026-01-01T00:00:00Z_{big}").status_code < 500


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\n\r\n",
        b"NOT HTTP AT ALL\r\n\r\n",
        b"GET /healthz HTTP/9.9\r\n\r\n",
    ],
)
def test_bytes_that_are_no_http_get_the_contracts_error_body(gateway: Gateway, request_bytes: bytes) -> None:
    status, error = status_and_error(raw_exchange(gateway, request_bytes))
    assert status == 400 and error["code"] == "invalid_request", error
