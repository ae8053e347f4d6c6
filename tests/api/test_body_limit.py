"""Request bodies are capped while they stream in: 413 `payload_too_large`, before the body is held whole.

Issue 9, item 6. Spoken over raw sockets, since the point is what the server does while a client is still
sending: an unauthenticated chunked POST must not grow the server's memory without bound.
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from support.app_in_thread import running_gateway
from support.harness import Gateway, Simulator, new_number
from wagate.core.config import Settings

MiB = 1024 * 1024
CHUNK = b"x" * (64 * 1024)
API_LIMIT = Settings().max_request_bytes
WEBHOOK_LIMIT = Settings().max_webhook_bytes


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: dict[str, Any]
    sent: int  # body bytes the client got out before the answer came
    seconds: float


def upload(
    gateway: Gateway, path: str, *, total: int, chunked: bool, content_length: int | None = None
) -> Answer:
    """POST `total` bytes to `path`, reading the answer as soon as the server gives one."""
    parts = urlsplit(gateway.url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    head = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", "Content-Type: application/json"]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {content_length or total}")
    started = time.monotonic()
    sent = 0
    with sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        while sent < total:
            if select.select([sock], [], [], 0)[0]:
                break  # the server answered: stop sending
            chunk = CHUNK[: total - sent]
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        else:
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        raw = _read_answer(sock)
    head_raw, _, body = raw.partition(b"\r\n\r\n")
    lines = head_raw.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return Answer(int(lines[0].split()[1]), headers, orjson.loads(body), sent, time.monotonic() - started)


def _read_answer(sock: socket.socket) -> bytes:
    raw = b""
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            break  # the server closed with our unread bytes in its buffer; its answer came before
        if not data:
            break
        raw += data
        head, _, body = raw.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            None,
        )
        if length is not None and len(body) >= length:
            break
    return raw


def assert_too_large(answer: Answer, limit: int) -> None:
    assert answer.status == 413, answer
    assert answer.body["error"]["code"] == "payload_too_large"
    assert str(limit) in answer.body["error"]["message"]
    assert answer.headers.get("connection") == "close"


@pytest.mark.parametrize("path", ["/whatsapp/messages", "/whatsapp/bulk_messages", "/webhooks"])
def test_an_endless_chunked_upload_gets_413_early_and_the_connection_closed(
    gateway: Gateway, path: str
) -> None:
    # No Authorization: the limit holds before anything else, for anyone.
    answer = upload(gateway, urlsplit(gateway.v1(path)).path, total=20 * MiB, chunked=True)
    assert_too_large(answer, API_LIMIT)
    # The answer came once the limit was passed, not after the 20 MiB: the server stopped reading (what
    # is still in flight is the sockets' buffers).
    assert answer.sent < 8 * MiB, answer.sent


def test_a_content_length_over_the_limit_is_refused_before_any_byte_of_the_body(gateway: Gateway) -> None:
    answer = upload(
        gateway,
        urlsplit(gateway.v1("/whatsapp/messages")).path,
        total=0,
        chunked=False,
        content_length=API_LIMIT + 1,
    )
    assert_too_large(answer, API_LIMIT)


def test_meta_webhooks_take_a_few_mib_and_no_more(gateway: Gateway) -> None:
    # Over the API's limit but within the webhooks' one: through to the signature check.
    within = upload(gateway, "/webhooks/whatsapp", total=2 * MiB, chunked=True)
    assert within.status == 401, within
    assert within.body["error"]["code"] == "unauthorized"
    over = upload(gateway, "/webhooks/whatsapp", total=20 * MiB, chunked=True)
    assert_too_large(over, WEBHOOK_LIMIT)
    assert over.sent < 12 * MiB, over.sent
    announced = upload(
        gateway, "/webhooks/whatsapp", total=0, chunked=False, content_length=WEBHOOK_LIMIT + 1
    )
    assert_too_large(announced, WEBHOOK_LIMIT)


def test_a_body_within_the_limit_is_read_as_before(gateway: Gateway) -> None:
    # Just up to the limit, chunked: read whole and judged on its content (here: not JSON).
    answer = upload(gateway, urlsplit(gateway.v1("/whatsapp/messages")).path, total=API_LIMIT, chunked=True)
    assert answer.status == 422 and answer.body["error"]["code"] == "invalid_request", answer


def test_the_limit_is_a_setting(database_url: str, simulator: Simulator) -> None:
    with running_gateway(database_url, simulator, max_request_bytes=4096) as small:
        template = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
        fits = small.send({"phone_number": new_number(), "template": template})
        assert fits.status_code == 201, fits.text
        answer = upload(small, urlsplit(small.v1("/whatsapp/messages")).path, total=8192, chunked=True)
        assert_too_large(answer, 4096)
