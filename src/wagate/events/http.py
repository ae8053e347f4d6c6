"""Posting one event to a subscriber's URL: 2xx within 10 s is success, anything else a failed attempt.

Redirects are not followed, and unless private URLs are allowed the connection may only go to a
public address: a resolver drops every loopback, private, link-local or multicast answer at the
moment of connecting, so a DNS record changed after registration (or a rebinding trick) cannot
point a delivery into the deployment's own network.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from wagate.events.urls import forbidden_address

DELIVERY_TIMEOUT_SECONDS = 10.0
RESPONSE_EXCERPT = 1000  # bytes of a receiver's answer kept with the attempt


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
            raise OSError(f"{host} resolves only to loopback, private, link-local or multicast addresses")
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
                excerpt = (await answer.content.read(RESPONSE_EXCERPT)).decode("utf-8", "replace")
                status = answer.status
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
    detail = str(exc).strip()
    return f"{type(exc).__name__}: {detail}"[:500] if detail else type(exc).__name__
