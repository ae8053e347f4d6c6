"""The connections events go out on (wagate.events.http on the HTTP/1.1 client of wagate.whatsapp.http1):
kept alive between deliveries to one origin, closed when idle too long or when an answer was cut
short, and what a receiver answers read as the attempt records it. The receivers here are raw asyncio
servers on loopback, so each test sees exactly which connections were made and closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from wagate.events import http as events_http
from wagate.events.http import EventPoster, PostResult

Answerer = Callable[[int], bytes]  # the n-th request on a connection (from 0) -> the raw answer


class Receiver:
    """An HTTP/1.1 server that answers each request with what `answer` gives, and counts the
    connections it accepted and those the client closed."""

    def __init__(self, answer: Answerer) -> None:
        self.answer = answer
        self.connections = 0
        self.closed_by_client = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/hook"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append(head + await reader.readexactly(length))
                writer.write(self.answer(n))
                await writer.drain()
                n += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_by_client += 1
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def ok(body: bytes = b"ok") -> Answerer:
    return lambda _: b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


def run(answer: Answerer, scenario: Callable[[EventPoster, str], Awaitable[None]]) -> Receiver:
    receiver = Receiver(answer)

    async def main() -> None:
        url = await receiver.start()
        poster = EventPoster(allow_private=True, timeout=2.0)
        try:
            await scenario(poster, url)
        finally:
            await poster.close()
            await asyncio.sleep(0.05)  # the server sees the close
            await receiver.stop()

    asyncio.run(main())
    return receiver


async def post(poster: EventPoster, url: str) -> PostResult:
    return await poster.post(url, b'{"type":"message_updated"}', {"content-type": "application/json"})


def test_deliveries_to_one_receiver_share_a_kept_alive_connection() -> None:
    results: list[PostResult] = []

    async def scenario(poster: EventPoster, url: str) -> None:
        for _ in range(5):
            results.append(await post(poster, url))

    receiver = run(ok(), scenario)
    assert [(r.status_code, r.error) for r in results] == [(200, None)] * 5
    assert receiver.connections == 1 and len(receiver.requests) == 5
    first = receiver.requests[0]
    assert first.startswith(b"POST /hook HTTP/1.1\r\n") and b"content-type: application/json" in first
    assert first.endswith(b'{"type":"message_updated"}')


def test_a_connection_idle_too_long_is_closed_and_a_new_one_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_http, "IDLE_SECONDS", 0.1)
    results: list[PostResult] = []

    async def scenario(poster: EventPoster, url: str) -> None:
        results.append(await post(poster, url))
        await asyncio.sleep(0.3)
        results.append(await post(poster, url))
        await asyncio.sleep(0.05)

    receiver = run(ok(), scenario)
    assert [r.status_code for r in results] == [200, 200]
    assert receiver.connections == 2
    assert receiver.closed_by_client == 2  # the idle one when it expired, the other at close()


def test_a_long_answer_is_cut_to_the_excerpt_and_its_connection_not_reused() -> None:
    long = "é".encode() * 10_000
    results: list[PostResult] = []

    def answer(n: int) -> bytes:
        body = long if len(results) == 0 else b"fine"
        return b"HTTP/1.1 503 Busy\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)

    async def scenario(poster: EventPoster, url: str) -> None:
        for _ in range(2):
            results.append(await post(poster, url))

    # Loopback counts as private: with the guard off, a private receiver's answer is never shown.
    receiver = run(answer, scenario)
    assert [(r.status_code, r.error, r.response) for r in results] == [(503, "HTTP 503", None)] * 2
    assert receiver.connections == 2


def test_what_a_public_receiver_answered_is_kept_short(monkeypatch: pytest.MonkeyPatch) -> None:
    # Loopback stands in for a public address (tests reach nothing else).
    monkeypatch.setattr(events_http, "forbidden_address", lambda address: False)
    chunked = (
        b"HTTP/1.1 400 Bad Request\r\ntransfer-encoding: chunked\r\n\r\n"
        b"5\r\nno wa\r\n3\r\ny\x00!\r\n0\r\n\r\n"
    )
    results: list[PostResult] = []

    async def scenario(poster: EventPoster, url: str) -> None:
        results.append(await post(poster, url))

    run(lambda _: chunked, scenario)
    result = results[0]
    assert (result.status_code, result.error, result.response) == (400, "HTTP 400", "no way\ufffd!")


def test_a_receiver_that_closes_after_answering_gets_a_new_connection_next_time() -> None:
    results: list[PostResult] = []
    answer = b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n"

    async def scenario(poster: EventPoster, url: str) -> None:
        for _ in range(3):
            results.append(await post(poster, url))

    receiver = run(lambda _: answer, scenario)
    assert [(r.status_code, r.error) for r in results] == [(204, None)] * 3
    assert receiver.connections == 3


def test_a_redirect_is_a_failed_attempt_and_not_followed() -> None:
    results: list[PostResult] = []
    answer = b"HTTP/1.1 302 Found\r\nlocation: http://169.254.169.254/\r\ncontent-length: 0\r\n\r\n"

    async def scenario(poster: EventPoster, url: str) -> None:
        results.append(await post(poster, url))

    receiver = run(lambda _: answer, scenario)
    assert (results[0].status_code, results[0].error, results[0].succeeded) == (
        302,
        "redirects are not followed",
        False,
    )
    assert len(receiver.requests) == 1


def test_a_receiver_that_is_not_listening_is_a_failed_attempt_with_the_reason() -> None:
    async def main() -> PostResult:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        poster = EventPoster(allow_private=True, timeout=2.0)
        try:
            return await post(poster, f"http://127.0.0.1:{port}/hook")
        finally:
            await poster.close()

    result = asyncio.run(main())
    assert result.status_code is None and result.error is not None
    assert result.error.startswith("ConnectFailed: ConnectionRefusedError"), result.error


def test_an_answer_whose_body_ends_when_the_connection_closes_is_read() -> None:
    """An HTTP/1.0-style answer (no length, no chunks: the body runs to the close), as small receivers
    built on a standard library's server send it."""
    results: list[PostResult] = []

    class Closing(Receiver):
        async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            self.requests.append(head + await reader.readexactly(length))
            writer.write(b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nthanks")
            await writer.drain()
            writer.close()

    receiver = Closing(ok())

    async def main() -> None:
        url = await receiver.start()
        poster = EventPoster(allow_private=True, timeout=2.0)
        try:
            for _ in range(2):
                results.append(await post(poster, url))
        finally:
            await poster.close()
            await receiver.stop()

    asyncio.run(main())
    assert [(r.status_code, r.error) for r in results] == [(200, None)] * 2
    assert receiver.connections == 2


def test_a_receiver_that_sends_an_endless_head_fails_the_attempt_early() -> None:
    """Its head is never kept past a bound, whatever the timeout: the attempt fails once it is passed."""
    results: list[PostResult] = []
    head = b"HTTP/1.1 200 OK\r\nx-padding: " + b"a" * 200_000  # no end of line, no end of head

    async def scenario(poster: EventPoster, url: str) -> None:
        results.append(await post(poster, url))

    receiver = run(lambda _: head, scenario)
    result = results[0]
    assert result.status_code is None and result.error is not None
    assert "head is longer than" in result.error, result.error
    assert result.latency_ms < 1000  # not the 2 s timeout
    assert receiver.connections == 1
