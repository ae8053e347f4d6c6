"""Load generators: closed loop (N connections, each sends again when answered) and open loop (a fixed
rate, whatever the latency), over a lean HTTP/1.1 client (httptools: about 44 us of client CPU a
request, a fraction of aiohttp's or httpx's, which the 2-core machine would take from the server).

Every run is bounded in time (its duration plus the request timeout) and stops early after
MAX_FAILED_REQUESTS requests without an answer.
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from common import LOOPBACK, latency_summary_ms


class RawConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection, one request at a time, responses parsed by httptools.

    A fraction of aiohttp's CPU per request: on a 2-core machine the load generator shares the CPU
    with the server it measures, so every microsecond it spends is taken from the server.
    """

    def __init__(self) -> None:
        import httptools

        self._parser = httptools.HttpResponseParser(self)
        self._parser_error = httptools.HttpParserError
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._body: list[bytes] = []
        self.usable = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except self._parser_error as exc:
            self._fail(ConnectionError(f"bad HTTP response: {exc!r}"))

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        status = self._parser.get_status_code()
        if not self._parser.should_keep_alive():
            self.usable = False
        body, self._body = b"".join(self._body), []
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result((status, body))

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        self._fail(ConnectionError(f"connection lost: {exc!r}"))

    def _fail(self, exc: Exception) -> None:
        self.usable = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.close()

    def _timed_out(self) -> None:
        self._fail(TimeoutError("no response in time"))

    async def request(self, data: bytes, deadline_s: float) -> tuple[int, bytes]:
        # A timer on the future, not asyncio.timeout(): no extra task or context per request.
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        timer = loop.call_later(deadline_s, self._timed_out)
        try:
            self.transport.write(data)
            return await self._waiter
        finally:
            timer.cancel()
            self._waiter = None

    def close(self) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.close()


class RawHttpClient:
    """POSTs over a pool of at most `max_connections` RawConnections to one host (keep-alive)."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        max_connections: int,
        timeout: float,
        unique_header: str | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host = parts.hostname or LOOPBACK
        self.port = parts.port or 80
        head = f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._head = head.encode("latin-1")
        # A header with a fresh value on every request (an Idempotency-Key, as a careful client sends).
        self._unique = unique_header.encode("latin-1") if unique_header else None
        self._unique_prefix = os.urandom(6).hex().encode()
        self._count = 0
        self._timeout = timeout
        self._idle: list[RawConnection] = []
        self._all: list[RawConnection] = []
        self._slots = asyncio.Semaphore(max_connections)

    async def _connect(self) -> RawConnection:
        loop = asyncio.get_running_loop()
        _, protocol = await asyncio.wait_for(
            loop.create_connection(RawConnection, self.host, self.port), self._timeout
        )
        self._all.append(protocol)
        return protocol

    async def post(self, body: bytes, extra_head: bytes = b"") -> tuple[int, bytes]:
        """`extra_head`: header lines of this request only (each ending in CRLF), e.g. a signature."""
        head = self._head + extra_head
        if self._unique is not None:
            self._count += 1
            head += b"%s: %s-%d\r\n" % (self._unique, self._unique_prefix, self._count)
        data = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        async with self._slots:
            connection = self._idle.pop() if self._idle else await self._connect()
            try:
                result = await connection.request(data, self._timeout)
            except BaseException:
                connection.close()
                raise
            if connection.usable:
                self._idle.append(connection)
            else:
                connection.close()
            return result

    async def close(self) -> None:
        for connection in self._all:
            connection.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)


@dataclass
class Sample:
    """One request as the client saw it; wall times are time.time(), latency from perf_counter()."""

    start_wall: float
    end_wall: float
    latency: float
    status: int  # 0: no response (connection error or timeout)
    body: bytes | None = None


@dataclass
class LoadResult:
    mode: str
    elapsed: float
    samples: list[Sample] = field(default_factory=list)
    ok_status: int = 201
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.status == self.ok_status]

    @property
    def ok_per_second(self) -> float:
        return len(self.ok) / self.elapsed if self.elapsed > 0 else 0.0

    def by_status(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for sample in self.samples:
            counts[str(sample.status)] = counts.get(str(sample.status), 0) + 1
        return dict(sorted(counts.items()))

    def summary(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "elapsed_s": round(self.elapsed, 3),
            "requests": len(self.samples),
            "ok": len(self.ok),
            "by_status": self.by_status(),
            "ok_per_second": round(self.ok_per_second, 1),
            "latency_ok": latency_summary_ms([s.latency for s in self.ok]),
            "failed": len(self.errors),
            "first_errors": self.errors[:5],
        }


MAX_FAILED_REQUESTS = 200  # a load run stops after this many requests without an answer


async def _one(client: RawHttpClient, body: bytes, keep_body: bool, errors: list[str]) -> Sample:
    start_wall = time.time()
    start = time.perf_counter()
    try:
        status, raw = await client.post(body)
    except Exception as exc:  # counted as status 0
        errors.append(repr(exc))
        raw, status = b"", 0
        await asyncio.sleep(0.01)  # a server that refuses must not turn the loop into a busy spin
    latency = time.perf_counter() - start
    return Sample(start_wall, time.time(), latency, status, raw if keep_body or status >= 400 else None)


async def closed_loop(
    url: str,
    *,
    make_body: Callable[[], bytes],
    headers: dict[str, str],
    concurrency: int,
    duration: float,
    ok_status: int = 201,
    keep_bodies: bool = False,
    request_timeout: float = 30.0,
    unique_header: str | None = None,
) -> LoadResult:
    """`concurrency` keep-alive connections, each sending its next request as soon as the last is answered.

    Throughput is answered requests over the time from the first send to the last answer (a request
    started before the deadline is waited for, so that no answer is cut off).
    """
    errors: list[str] = []
    http = RawHttpClient(url, headers, concurrency, request_timeout, unique_header)
    try:
        deadline = time.perf_counter() + duration

        async def worker() -> list[Sample]:
            mine: list[Sample] = []
            # Bounded in time by the deadline, and in count in case the clock misbehaves.
            for _ in range(10_000_000):
                if time.perf_counter() >= deadline or len(errors) > MAX_FAILED_REQUESTS:
                    break
                mine.append(await _one(http, make_body(), keep_bodies, errors))
            return mine

        start = time.perf_counter()
        async with asyncio.timeout(duration + request_timeout + 5):
            per_worker = await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    finally:
        await http.close()
    samples = [s for chunk in per_worker for s in chunk]
    return LoadResult("closed", elapsed, samples, ok_status, errors)


async def open_loop(
    url: str,
    *,
    make_body: Callable[[], bytes],
    headers: dict[str, str],
    rate: float,
    duration: float,
    ok_status: int = 201,
    keep_bodies: bool = True,
    max_connections: int = 256,
    request_timeout: float = 30.0,
    unique_header: str | None = None,
) -> LoadResult:
    """Requests started on a fixed schedule (`rate` per second), whatever the answers' latency."""
    errors: list[str] = []
    count = max(1, round(rate * duration))
    http = RawHttpClient(url, headers, max_connections, request_timeout, unique_header)
    try:
        tasks: list[asyncio.Task[Sample]] = []
        start = time.perf_counter() + 0.01
        for index in range(count):
            if len(errors) > MAX_FAILED_REQUESTS:
                break
            delay = start + index / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(http, make_body(), keep_bodies, errors)))
        done, pending = await asyncio.wait(tasks, timeout=request_timeout + 5)
        for task in pending:
            task.cancel()
        elapsed = time.perf_counter() - start
    finally:
        await http.close()
    samples = [t.result() for t in done if not t.cancelled() and t.exception() is None]
    samples.sort(key=lambda s: s.start_wall)
    return LoadResult("open", elapsed, samples, ok_status, errors)


def install_uvloop() -> bool:
    """Use uvloop in the load generator when it is installed (uvicorn[standard] serves with it too)."""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True
