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
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from wagate.events.urls import forbidden_address
from wagate.limits import CONTROL_CHARACTER

DELIVERY_TIMEOUT_SECONDS = 10.0
# Characters of a receiver's answer kept with the attempt, which agents read: enough for a reason,
# too little to read a document through a status_callback. Kept only when the receiver's address is
# public: with WAGATE_ALLOW_PRIVATE_URLS an endpoint inside the network is posted to, but what it
# answers is not shown.
RESPONSE_EXCERPT = 256


@dataclass(frozen=True)
class PostResult:
    status_code: int | None
    latency_ms: int
    error: str | None
    response: str | None

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class PublicAddressesOnly(AbstractResolver):
    """The system resolver, keeping only the answers that are public addresses."""

    def __init__(self) -> None:
        self._resolver = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers = await self._resolver.resolve(host, port, family)
        public = [a for a in answers if not forbidden_address(a["host"])]
        if not public:
            raise OSError(f"{host} resolves only to addresses that are not public")
        return public

    async def close(self) -> None:
        await self._resolver.close()


class EventPoster:
    """One keep-alive connection pool for all deliveries of a process (created in its event loop)."""

    def __init__(
        self, *, allow_private: bool, pool_limit: int = 256, timeout: float = DELIVERY_TIMEOUT_SECONDS
    ) -> None:
        self.allow_private = allow_private
        self.timeout = timeout
        # As many connections as the dispatcher has deliveries open, so none waits for a connection
        # (that wait would count against its 10 s).
        self.pool_limit = pool_limit
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.pool_limit,
                resolver=None if self.allow_private else PublicAddressesOnly(),
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                raise_for_status=False,
                auto_decompress=False,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> PostResult:
        started = time.perf_counter()

        def result(status: int | None, error: str | None, response: str | None = None) -> PostResult:
            return PostResult(status, round((time.perf_counter() - started) * 1000), error, response)

        refused = self._refused_literal(url)
        if refused:
            return result(None, refused)
        try:
            async with self._get_session().post(
                url, data=body, headers=headers, allow_redirects=False
            ) as answer:
                status = answer.status
                shown = self._shown(answer)
                # Read even when not shown: a short answer read to its end lets the connection be reused.
                excerpt = await self._excerpt(answer)
                if not shown:
                    excerpt = ""
        except TimeoutError:
            return result(None, f"no answer within {self.timeout:g} s")
        except aiohttp.InvalidURL:
            return result(None, "invalid URL")
        except (aiohttp.ClientError, OSError) as exc:
            return result(None, _describe(exc))
        except asyncio.CancelledError:
            raise
        if 300 <= status < 400:
            return result(status, "redirects are not followed", excerpt or None)
        return result(status, None if 200 <= status < 300 else f"HTTP {status}", excerpt or None)

    def _shown(self, answer: aiohttp.ClientResponse) -> bool:
        """Whether the answer came from a public address (always so when the guard is on)."""
        if not self.allow_private:
            return True
        connection = answer.connection
        transport = connection.transport if connection is not None else None
        peer: Any = transport.get_extra_info("peername") if transport is not None else None
        return isinstance(peer, tuple) and bool(peer) and not forbidden_address(str(peer[0]))

    @staticmethod
    async def _excerpt(answer: aiohttp.ClientResponse) -> str:
        # At most 4 bytes a character; control characters (NUL, which PostgreSQL refuses in text,
        # among them) shown as U+FFFD.
        raw = await answer.content.read(RESPONSE_EXCERPT * 4)
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
    # aiohttp's texts name the host and the OS error, never our headers (the signature), so they are safe.
    detail = CONTROL_CHARACTER.sub("\ufffd", str(exc).strip())
    return f"{type(exc).__name__}: {detail}"[:500] if detail else type(exc).__name__
