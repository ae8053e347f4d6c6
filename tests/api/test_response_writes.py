"""How `wagate serve` writes a response (wagate.serving): its head waits for its body so that the two go
out in one send, but never longer than the event loop's next turn, so a body that takes its time (a
stream, the dashboard's live feed) does not hold the head back. Spoken over raw sockets, to see what
arrives when."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from wagate.config import Settings
from wagate.serving import guarded_protocol
from wagate.simulator.server import start_in_thread

BODY_DELAY = 1.5  # seconds between the head and the body of /slow


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b'{"ok":true}'
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    if scope["path"] == "/slow":
        await asyncio.sleep(BODY_DELAY)
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    url, stop = start_in_thread(app, http=guarded_protocol(Settings()))
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    try:
        yield parts.hostname, parts.port
    finally:
        stop()


def read_until(sock: socket.socket, end: bytes, seconds: float) -> bytes:
    sock.settimeout(seconds)
    data = b""
    while not data.endswith(end):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_a_head_goes_out_before_a_body_that_takes_its_time(server: tuple[str, int]) -> None:
    with socket.create_connection(server) as sock:
        asked = time.monotonic()
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        head = read_until(sock, b"\r\n\r\n", BODY_DELAY * 2)
        head_after = time.monotonic() - asked
        assert head.startswith(b"HTTP/1.1 200 ") and b"content-length: 11" in head.lower(), head
        assert head_after < BODY_DELAY / 2, f"the head waited {head_after:.2f} s for its body"
        body = read_until(sock, b"}", BODY_DELAY * 4)
        assert body == b'{"ok":true}'
        assert time.monotonic() - asked >= BODY_DELAY


def test_responses_on_one_connection_each_arrive_whole(server: tuple[str, int]) -> None:
    expected = b'{"ok":true}'
    with socket.create_connection(server) as sock:
        for _ in range(3):
            sock.sendall(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = read_until(sock, expected, 5.0)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ") and body == expected, answer
        # A HEAD has no body: its head alone comes, and the connection goes on.
        sock.sendall(b"HEAD /fast HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_until(sock, b"\r\n\r\n", 5.0).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_until(sock, expected, 5.0).endswith(b"\r\n\r\n" + expected)
