"""Posting one event to a subscriber's URL: 2xx within 10 s is success, anything else a failed attempt.

Redirects are not followed, and unless private URLs are allowed the connection may only go to a
public address: a resolver drops every answer that is not globally routable (loopback, private,
shared, link-local, multicast, reserved) at the moment of connecting, so a DNS record changed after
registration (or a rebinding trick) cannot point a delivery into the deployment's own network.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from wagate.events.urls import forbidden_address
from wagate.http.limits import CONTROL_CHARACTER
from wagate.whatsapp.http1 import Answer, Http1Pool, HttpFailure, InvalidTarget, request_target

DELIVERY_TIMEOUT_SECONDS = 10.0
# Characters of a receiver's answer kept with the attempt, which agents read: enough for a reason,
# too little to read a document through a status_callback. Kept only when the receiver's address is
# public: with WAGATE_ALLOW_PRIVATE_URLS an endpoint inside the network is posted to, but what it
# answers is not shown.
RESPONSE_EXCERPT = 256
# A subscriber's connection left idle this long is closed rather than reused (as aiohttp, used here
# before, did after 15 s): a receiver's server may have dropped it meanwhile, and a subscriber that
# stopped getting events should not keep a connection of ours open.
IDLE_SECONDS = 15.0
# Sent with every delivery (the caller's headers come after): some receivers' firewalls refuse a
# request that names no client.
_HEADERS = {"user-agent": "wagate"}


@dataclass(frozen=True)
class PostResult:
    status_code: int | None
    latency_ms: int
    error: str | None
    response: str | None

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


async def public_addresses(host: str, port: int) -> list[str]:
    """The system resolver's addresses for `host`, keeping only the public ones (asked each time a
    connection is made, so a record changed since the URL was checked still cannot point inward)."""
    answers = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    public = list(dict.fromkeys(str(a[4][0]) for a in answers if not forbidden_address(str(a[4][0]))))
    if not public:
        raise OSError(f"{host} resolves only to addresses that are not public")
    return public


class EventPoster:
    """Keep-alive connections for all deliveries of a process, one pool per subscriber's origin
    (created in its event loop), on the same HTTP/1.1 client as the calls to Meta: aiohttp's general
    machinery cost about a quarter of a delivered event's CPU (docs/performance.md, "Event delivery")."""

    def __init__(
        self, *, allow_private: bool, pool_limit: int = 256, timeout: float = DELIVERY_TIMEOUT_SECONDS
    ) -> None:
        self.allow_private = allow_private
        self.timeout = timeout
        # As many connections per origin as the dispatcher has deliveries open, so none waits for a
        # connection (that wait would count against its 10 s).
        self.pool_limit = pool_limit
        self._pools: dict[tuple[str, str, int | None], Http1Pool] = {}
        self._swept = time.monotonic()

    def _pool(self, url: str) -> Http1Pool:
        parts = urlsplit(url)
        origin = (parts.scheme.lower(), (parts.hostname or "").lower(), parts.port)
        pool = self._pools.get(origin)
        if pool is None:
            pool = self._pools[origin] = Http1Pool(
                url,
                limit=self.pool_limit,
                # The whole attempt has one deadline (`post`); these only stop a pool waiting longer.
                connect_timeout=self.timeout + 1,
                timeout=self.timeout + 1,
                resolve=None if self.allow_private else public_addresses,
                # Enough for the excerpt at 4 bytes a character; a longer answer is cut there and its
                # connection closed.
                max_answer_bytes=RESPONSE_EXCERPT * 4,
                truncate=True,
                idle_seconds=IDLE_SECONDS,
            )
        return pool

    def _sweep(self) -> None:
        """Now and then: close what was idle too long and forget the origins left with nothing open."""
        now = time.monotonic()
        if now - self._swept < IDLE_SECONDS:
            return
        self._swept = now
        for origin, pool in list(self._pools.items()):
            pool.close_idle()
            if pool.unused:
                pool.close()
                del self._pools[origin]

    async def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> PostResult:
        started = time.perf_counter()

        def result(status: int | None, error: str | None, response: str | None = None) -> PostResult:
            return PostResult(status, round((time.perf_counter() - started) * 1000), error, response)

        refused = self._refused_literal(url)
        if refused:
            return result(None, refused)
        self._sweep()
        try:
            pool = self._pool(url)
            async with asyncio.timeout(self.timeout):
                answer = await pool.exchange("POST", request_target(url), {**_HEADERS, **headers}, body)
        except TimeoutError:
            return result(None, f"no answer within {self.timeout:g} s")
        except (InvalidTarget, ValueError):  # ValueError: urlsplit's, of a URL it cannot take apart
            return result(None, "invalid URL")
        except HttpFailure as exc:
            return result(None, _describe(exc))
        status = answer.status
        excerpt = self._excerpt(answer) if self._shown(answer) else ""
        if 300 <= status < 400:
            return result(status, "redirects are not followed", excerpt or None)
        return result(status, None if 200 <= status < 300 else f"HTTP {status}", excerpt or None)

    def _shown(self, answer: Answer) -> bool:
        """Whether the answer came from a public address (always so when the guard is on)."""
        if not self.allow_private:
            return True
        return answer.peer is not None and not forbidden_address(answer.peer)

    @staticmethod
    def _excerpt(answer: Answer) -> str:
        # At most 4 bytes a character; control characters (NUL, which PostgreSQL refuses in text,
        # among them) shown as U+FFFD.
        raw = answer.body[: RESPONSE_EXCERPT * 4]
        return CONTROL_CHARACTER.sub("\ufffd", raw.decode("utf-8", "replace")[:RESPONSE_EXCERPT])

    def _refused_literal(self, url: str) -> str | None:
        """An address written into the URL never goes through the resolver, so it is checked here."""
        if self.allow_private:
            return None
        host = urlsplit(url).hostname or ""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return None
        return f"{host} is not a public address" if forbidden_address(host) else None


def _describe(exc: BaseException) -> str:
    # The client's texts name the OS error or what the answer lacked, never our headers (the
    # signature), so they are safe.
    detail = CONTROL_CHARACTER.sub("\ufffd", str(exc).strip())
    return f"{type(exc).__name__}: {detail}"[:500] if detail else type(exc).__name__
