"""How wagate is served by uvicorn: its HTTP protocol, with limits on the request line and headers.

uvicorn has no limit of its own on how long a client may take to send a request's head, nor on how
large the head may be: a client that opens connections and sends a header byte now and then (the
"slowloris" attack) holds each connection for ever, and an endless header grows in memory. The
protocol below closes such connections:

- the request line and headers must arrive within `header_timeout_seconds` of the connection being
  made or of the request's first byte (408 `request_timeout`);
- they may hold at most `max_header_bytes` (431 `headers_too_large`), counted while they stream in.

Between requests uvicorn's keep-alive timeout closes idle connections; once the head is in, the body
has its own deadline (`RequestGuard` in `wagate.http.limits`). Every refusal is the contract's error body.

`settle_heap` sets Python's collector up for a long-running process (`serve`, `worker`) once started.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import threading
from collections.abc import Iterator
from typing import Any

import orjson
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import HANDLED_SIGNALS

from wagate.core.config import Settings
from wagate.core.errors import HeadersTooLarge, NotHttp, RequestTimeout, WagateError

# Container objects allocated (net of those freed) before the collector's youngest pass runs; Python's
# default is 700. Each pass that reaches the oldest generation walks every object made since start-up,
# and with 700 that came every 0.8 s under load, 7-17 ms each, stalling every request in flight
# (docs/decisions/0005-request-path.md).
YOUNG_GENERATION_THRESHOLD = 20_000

_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class _HeadRefused(Exception):
    """Raised from a parser callback to stop parsing a head that broke a limit."""


class _HeadWithBody:
    """The transport one request's cycle writes its response through. uvicorn writes a response's
    head and its body in two calls: on loopback or a LAN, two syscalls and two TCP segments for every
    answer. The cycle's first write (the head) is held until its next one (the body, nearly always in
    the same turn of the event loop) or the end of that turn, whichever comes first; every later
    write goes straight out. So nothing waits beyond the turn that wrote it, and nothing is held once
    a body has begun (docs/decisions/0005-request-path.md)."""

    __slots__ = ("_first", "_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._first = True

    def write(self, data: bytes) -> None:
        if self._first:
            self._first = False
            self._held = data
            self._loop.call_soon(self._release)
        elif self._held is not None:
            held, self._held = self._held, None
            self._transport.write(held + data)
        else:
            self._transport.write(data)

    def _release(self) -> None:
        held, self._held = self._held, None
        # A connection lost within the turn takes no more writes (uvloop raises on a closed handle).
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._release()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # the rest of the transport's interface, as it is
        return getattr(self._transport, name)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits above (`guarded_protocol` sets them)."""

    max_header_bytes = 16 * 1024
    header_timeout_seconds = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._awaiting_head = True
        self._in_head = False  # a request's head has begun and is not complete yet
        self._head_bytes = 0  # bytes received while the head was incomplete (an upper bound)
        self._header_bytes = 0  # bytes of the request line and headers, as parsed
        self._head_timer: asyncio.TimerHandle | None = None
        self._refusal: WagateError | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()  # a connection that never sends a byte is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._awaiting_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._awaiting_head and self._head_bytes > self.max_header_bytes and self._refusal is None:
            # The head is still incomplete and already too large: do not keep reading it.
            self._refuse(_too_large(self.max_header_bytes))
        elif self._in_head and self._head_timer is None and self._refusal is None:
            # Only a head still incomplete after what came gets a timer: one that came in one
            # piece (nearly every request) makes and cancels none
            # (docs/decisions/0005-request-path.md).
            self._arm_head_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._awaiting_head = True
        self._in_head = True
        self._header_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._header_bytes += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        if self._header_bytes > self.max_header_bytes:
            self._refusal = _too_large(self.max_header_bytes)
            raise _HeadRefused  # the parser stops; uvicorn answers through send_400_response
        self._awaiting_head = False
        self._in_head = False
        self._head_bytes = 0
        earlier = self.cycle
        super().on_headers_complete()
        if self.cycle is not earlier and self.cycle is not None:  # not an upgrade to a websocket
            self.cycle.transport = _HeadWithBody(self.transport, self.loop)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._awaiting_head = True  # the next request's head may follow on this connection
        self._head_bytes = 0

    def send_400_response(self, msg: str) -> None:
        # uvicorn's answer to bytes that are no HTTP request (a control character in a header, a
        # broken request line), in plain text: the contract's error body instead.
        self._write_refusal(self._refusal or NotHttp())

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.header_timeout_seconds, self._head_too_slow)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._awaiting_head:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False  # a response is still being written: close after it
            return
        self._refuse(
            RequestTimeout(
                f"The request line and headers did not arrive within {self.header_timeout_seconds:g} seconds."
            )
        )

    def _refuse(self, error: WagateError) -> None:
        self._refusal = error
        self._write_refusal(error)

    def _write_refusal(self, error: WagateError) -> None:
        self._cancel_head_timer()
        if self.transport.is_closing():
            return
        body = orjson.dumps(error.body())
        head = (
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % (error.status_code, _REASONS[error.status_code], len(body))
        )
        self.transport.write(head + body)
        self.transport.close()


def _too_large(limit: int) -> HeadersTooLarge:
    return HeadersTooLarge(f"The request line and headers are too large: send at most {limit} bytes.")


def guarded_protocol(settings: Settings) -> type[GuardedHttpProtocol]:
    """The protocol class with the deployment's limits (uvicorn makes one instance per connection)."""
    return type(
        "GuardedHttpProtocol",
        (GuardedHttpProtocol,),
        {
            "max_header_bytes": settings.max_header_bytes,
            "header_timeout_seconds": settings.header_timeout_seconds,
        },
    )


class DrainingServer(uvicorn.Server):
    """uvicorn's server, except that a SIGTERM (or SIGINT) it has drained ends the process with 0.

    On the signal uvicorn stops taking connections, lets the requests under way finish, and runs the
    app's shutdown (the dispatcher finishes its upstream calls, records them and gives back what it
    claimed). Then stock uvicorn raises the signal again, so the process dies of it (exit -15); a stop
    that went as planned is a success for the supervisor (systemd, an orchestrator), so it exits 0.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


class SideServer(uvicorn.Server):
    """A second uvicorn server in a process that already has its signal handling (the metrics
    listener beside `serve`'s server or in a worker): it leaves the signals alone, and is stopped by
    its owner (`should_exit`)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """What every uvicorn server of the gateway runs with (`serve`, the sandbox, the tests)."""
    # Logging is the process's (wagate.observability.logs.configure_logging): uvicorn neither installs
    # handlers of its own nor writes an access line, since `RequestLog` writes one per request, with its id.
    # X-Forwarded-For and X-Forwarded-Proto are taken from the peers of WAGATE_TRUSTED_PROXIES only
    # (uvicorn's ProxyHeadersMiddleware; its FORWARDED_ALLOW_IPS variable is not read).
    return {
        "http": guarded_protocol(settings),
        "log_level": settings.log_level,
        "log_config": None,
        "access_log": False,
        "proxy_headers": bool(settings.trusted_proxies),
        "forwarded_allow_ips": settings.trusted_proxies or None,
    }


def settle_heap() -> None:
    """Once a long-running process (`serve`, `worker`) has started: keep what exists now out of the
    collector's passes (it lives as long as the process), and run them far less often. The gateway's
    garbage is nearly all freed by reference counting (a full pass under load found 0-25 objects), so
    the passes cost CPU and stalls for almost nothing; the older generations keep Python's ratios,
    so cycles are still collected, only later."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, older, oldest)
