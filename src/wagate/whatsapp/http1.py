"""A small HTTP/1.1 client for the calls to the Cloud API and the events posted to subscribers:
keep-alive connections on asyncio's own transports, answers parsed by httptools (the C parser uvicorn
serves us with).

Why not aiohttp: every send is one such call, and aiohttp's general machinery (its request and
response objects, tracing, cookie jar, timeouts per phase) cost 0.16-0.26 ms of CPU per call, more
than the simulator's whole answer and half of a dispatched send's budget (docs/performance.md,
"Where the time goes now"). The calls to Meta have one shape: a small JSON POST (or a GET of the
template listing) to one origin, answered with a small JSON body, so the client needs only that.

Where a call got to decides what a failure means, and the two exceptions say it:
- `ConnectFailed`: nothing was written (no free connection within the connect timeout, the connect
  or the TLS handshake failed or timed out): the call can be made again;
- `ExchangeFailed`: the request was written, then the connection broke, the answer was not HTTP, or
  no complete answer came within the timeout: the server may have acted on it.
A connection whose server closed it while idle is seen closed (`connection_lost`) and not reused.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

# An answer larger than this is no answer of the Cloud API's (a send's is about 200 bytes, a page
# of templates some tens of kilobytes).
MAX_ANSWER_BYTES = 8 * 1024 * 1024
# An answer's status line and headers may not run longer than this (the parser keeps an incomplete
# head in memory): an event's receiver is anyone's server, and one that sent an endless header would
# otherwise grow it for the whole timeout.
MAX_HEAD_BYTES = 64 * 1024


class HttpFailure(Exception):
    pass


class ConnectFailed(HttpFailure):
    """Nothing of the request was written."""


class ExchangeFailed(HttpFailure):
    """The request was written (wholly or in part); its outcome is unknown."""


class InvalidTarget(ConnectFailed):
    """The URL or a header cannot be written as HTTP (nothing was sent)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most the pool's `max_answer_bytes` (see `truncate`)
    peer: str | None  # the address the connection went to


class Written:
    """When a request was written to its connection (`time.monotonic()`), or None while it was not:
    the caller passes one down and reads it once the exchange is over (the pacing counts a send from
    that moment: from then on Meta may have it)."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: float | None = None


# Resolves a host to the addresses a connection may go to, in the order to try them; raises OSError
# when there is none (wagate.events.http drops every address that is not public).
Resolver = Callable[[str, int], Awaitable[list[str]]]


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one exchange at a time, its answer parsed as it arrives. An answer
    over `max_answer_bytes` fails the exchange, or with `truncate` ends it with what came so far and
    closes the connection (the rest is never read)."""

    def __init__(self, max_answer_bytes: int = MAX_ANSWER_BYTES, truncate: bool = False) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.answer: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self.body: list[bytes] = []
        self.size = 0
        self.max_answer_bytes = max_answer_bytes
        self.truncate = truncate
        self.peer: str | None = None
        self.idle_since = 0.0
        self.head_done = False  # this answer's status line and headers are in
        self.head_bytes = 0  # bytes received while they were not
        self.delimited = False  # its body has a length or chunks; else it runs to the close

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else None

    def data_received(self, data: bytes) -> None:
        if self.answer is None or self.answer.done():
            self._fail(ExchangeFailed("the server sent bytes nobody asked for"))  # not reusable
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ExchangeFailed(f"the answer is not HTTP/1.1 ({exc})"))
            return
        if not self.head_done:
            # Counted only while the head stays incomplete: a head and a large body in one read is fine.
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                self._fail(ExchangeFailed(f"the answer's head is longer than {MAX_HEAD_BYTES} bytes"))

    def eof_received(self) -> bool:
        return False  # close our side too: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.answer is not None and not self.answer.done():
            if exc is None and self.head_done and not self.delimited:
                # An answer without a length or chunks (HTTP/1.0 style) ends when the server closes.
                self.answer.set_result((self.parser.get_status_code(), b"".join(self.body), False))
                return
            reason = f": {type(exc).__name__} ({exc})" if exc else ""
            self.answer.set_exception(ExchangeFailed(f"the connection closed before the answer{reason}"))

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.head_done = self.delimited = False
        self.head_bytes = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.delimited = True

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        if self.answer is None or self.answer.done():
            return  # the rest of an answer cut short
        room = self.max_answer_bytes - self.size
        self.size += len(body)
        if self.size <= self.max_answer_bytes:
            self.body.append(body)
        elif self.truncate:
            self.body.append(body[:room])
            self.answer.set_result((self.parser.get_status_code(), b"".join(self.body), False))
            self.close()
        else:
            self._fail(ExchangeFailed(f"the answer is larger than {self.max_answer_bytes} bytes"))

    def on_message_complete(self) -> None:
        if self.answer is not None and not self.answer.done():
            status = self.parser.get_status_code()
            self.answer.set_result((status, b"".join(self.body), self.parser.should_keep_alive()))

    def _fail(self, error: ExchangeFailed) -> None:
        self.closed = True
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(error)
        if self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _too_late(self, seconds: float) -> None:
        self._fail(ExchangeFailed(f"no complete answer within {seconds:g} s"))

    async def exchange(
        self, request: bytes, written: Written | None, answer_within: float
    ) -> tuple[int, bytes, bool]:
        """The answer to `request`; ExchangeFailed (and the connection closed) when it is not all
        in within `answer_within` seconds. A timer of the loop's own rather than `asyncio.timeout`,
        which costs twice as much CPU on every call to Meta (docs/decisions/0005-request-path.md)."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ConnectFailed("the connection closed before the request was written")
        loop = asyncio.get_running_loop()
        self.answer = loop.create_future()
        self.body, self.size = [], 0
        self.transport.write(request)
        if written is not None:
            # Handed to the kernel's socket buffer (or queued right behind it): Meta may have it.
            written.at = time.monotonic()
        too_late = loop.call_later(answer_within, self._too_late, answer_within)
        try:
            return await self.answer
        finally:
            too_late.cancel()


class Http1Pool:
    """Keep-alive connections to one origin (`base_url`'s scheme, host and port), at most `limit` open.

    One instance per event loop. `exchange` waits up to `connect_timeout` for a free connection and
    for a new one to connect, then up to `timeout` for the whole answer once the request is written.
    `resolve`: where a new connection may go (see `Resolver`; else the host as given, by the system's
    resolver). `idle_seconds`: an idle connection older than this is closed rather than reused.
    """

    def __init__(
        self,
        base_url: str,
        *,
        limit: int,
        connect_timeout: float,
        timeout: float,
        resolve: Resolver | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        truncate: bool = False,
        idle_seconds: float | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        self.scheme = parts.scheme.lower()
        if self.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidTarget(f"not an http(s) URL: {self.scheme}://...")
        self.host = parts.hostname
        self.port = parts.port or (443 if self.scheme == "https" else 80)
        default_port = parts.port is None or parts.port == (443 if self.scheme == "https" else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self.ssl = ssl.create_default_context() if self.scheme == "https" else None
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.resolve = resolve
        self.max_answer_bytes = max_answer_bytes
        self.truncate = truncate
        self.idle_seconds = idle_seconds
        self.slots = asyncio.Semaphore(limit)
        self.idle: list[_Connection] = []
        self.busy: set[_Connection] = set()
        self.closed = False

    def _idle_connection(self) -> _Connection | None:
        self.close_idle()
        while self.idle:
            connection = self.idle.pop()
            transport = connection.transport
            if not connection.closed and transport is not None and not transport.is_closing():
                return connection
        return None

    def close_idle(self) -> None:
        """Close the idle connections kept longer than `idle_seconds` (the oldest are first)."""
        if self.idle_seconds is None:
            return
        oldest = time.monotonic() - self.idle_seconds
        while self.idle and self.idle[0].idle_since < oldest:
            self.idle.pop(0).close()

    @property
    def unused(self) -> bool:
        """Nothing open and nothing under way: the pool can be dropped."""
        return not self.idle and not self.busy

    async def _new_connection(self) -> _Connection:
        loop = asyncio.get_running_loop()

        def protocol() -> _Connection:
            return _Connection(self.max_answer_bytes, self.truncate)

        hostname = self.host if self.ssl else None
        # Without a resolver the host goes to create_connection, which resolves and tries each address.
        addresses = [self.host] if self.resolve is None else await self.resolve(self.host, self.port)
        failure: OSError | None = None
        for address in addresses:
            try:
                _, made = await loop.create_connection(
                    protocol, address, self.port, ssl=self.ssl, server_hostname=hostname
                )
                return made
            except OSError as exc:
                failure = exc
        raise failure or OSError(f"{self.host} has no address")

    async def exchange(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes | None = None,
        *,
        written: Written | None = None,
    ) -> Answer:
        """The answer to `method target`, with the address it came from; raises ConnectFailed or
        ExchangeFailed. `written`: told when the request was written."""
        if self.closed:
            raise ConnectFailed("the client is closed")
        request = self._encode(method, target, headers, body)
        # One deadline for a free connection and a new one's connect (and TLS handshake); a call that
        # finds both at hand (the usual case) sets no timer for them.
        deadline = asyncio.get_running_loop().time() + self.connect_timeout
        if self.slots.locked():
            try:
                async with asyncio.timeout_at(deadline):
                    await self.slots.acquire()
            except TimeoutError:
                raise ConnectFailed(f"no free connection within {self.connect_timeout:g} s") from None
        else:
            await self.slots.acquire()  # returns at once
        connection: _Connection | None = None
        keep = False
        try:
            connection = self._idle_connection()
            if connection is None:
                try:
                    async with asyncio.timeout_at(deadline):
                        connection = await self._new_connection()
                except TimeoutError:
                    raise ConnectFailed(f"could not connect within {self.connect_timeout:g} s") from None
                except (OSError, ssl.SSLError) as exc:
                    raise ConnectFailed(f"{type(exc).__name__} ({exc})") from None
            self.busy.add(connection)
            status, answer, keep = await connection.exchange(request, written, self.timeout)
            return Answer(status, answer, connection.peer)
        finally:
            if connection is not None:
                self.busy.discard(connection)
                if keep and not connection.closed and not self.closed:
                    connection.idle_since = time.monotonic()
                    self.idle.append(connection)
                else:
                    connection.close()
            self.slots.release()

    def _encode(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> bytes:
        # Printable ASCII only: a line break in a value would write a header of its own.
        if not _printable(target) or " " in target or not all(map(_printable, headers.values())):
            raise InvalidTarget("the request's URL or a header cannot be written as HTTP/1.1")
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")

    def close(self) -> None:
        self.closed = True
        for connection in [*self.idle, *self.busy]:
            connection.close()
        self.idle.clear()
        self.busy.clear()


def _printable(text: str) -> bool:
    return text.isascii() and text.isprintable()


def request_target(url: str) -> str:
    """The path and query of an absolute URL, as a request line names them."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
