"""A webhook receiver for bench/events_delivery.py, in its own process: answers every POST 200 at once.

It counts requests and distinct `webhook-id`s, keeps each request's arrival time (wall clock, so the
bench can compare it with the moment it committed the events), and checks the Standard Webhooks
signature of every `--verify-every`-th request with the `standardwebhooks` package. GET /stats gives
the counters, GET /arrivals the arrival times.

A raw asyncio protocol with httptools' parser (and uvloop when installed), not a web framework: on a
2-core machine the receiver's CPU is taken from the gateway under test, so it must cost little.

    WAGATE_BENCH_RECEIVER_SECRET=whsec_... python bench/event_receiver.py --port 8300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import httptools
from standardwebhooks import Webhook, WebhookVerificationError

LOOPBACK = "127.0.0.1"
SECRET_ENV = "WAGATE_BENCH_RECEIVER_SECRET"  # noqa: S105 - the name of a variable, not a secret
# The headers a delivery is recognised and verified by; the others are not kept.
WANTED_HEADERS = frozenset({b"webhook-id", b"webhook-timestamp", b"webhook-signature"})
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
OK_CLOSE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass
class Counters:
    verifier: Webhook
    verify_every: int
    requests: int = 0
    without_id: int = 0
    verified: int = 0
    signature_failures: int = 0
    first_failure: str | None = None
    ids: set[str] = field(default_factory=set)
    arrivals: list[float] = field(default_factory=list)
    connections: int = 0

    def record(self, headers: dict[str, str], body: bytes) -> None:
        now = time.time()
        self.requests += 1
        self.arrivals.append(now)
        event_id = headers.get("webhook-id")
        if event_id is None:
            self.without_id += 1
        else:
            self.ids.add(event_id)
        # The first request and every n-th after it: signature checks cost CPU the gateway needs.
        if (self.requests - 1) % self.verify_every == 0:
            self.verified += 1
            try:
                self.verifier.verify(body, headers)
            except (WebhookVerificationError, ValueError) as exc:
                self.signature_failures += 1
                self.first_failure = self.first_failure or repr(exc)

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "distinct_ids": len(self.ids),
            "without_id": self.without_id,
            "verified": self.verified,
            "signature_failures": self.signature_failures,
            "first_failure": self.first_failure,
            "first_at": self.arrivals[0] if self.arrivals else None,
            "last_at": self.arrivals[-1] if self.arrivals else None,
            "connections": self.connections,
        }


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; requests are answered in the order they come."""

    def __init__(self, counters: Counters) -> None:
        self.counters = counters
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport
        self.counters.connections += 1

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                self.transport.close()

    def on_message_begin(self) -> None:
        self.url, self.headers, self.body = b"", {}, []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name in WANTED_HEADERS:
            self.headers[name.decode()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        method = self.parser.get_method()
        if method == b"GET" and self.url in (b"/stats", b"/arrivals"):
            counters = self.counters
            answer = counters.stats() if self.url == b"/stats" else {"arrivals": counters.arrivals}
            payload = json.dumps(answer).encode()
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(payload), payload)
            )
        elif method == b"POST":
            self.counters.record(self.headers, b"".join(self.body))
            keep_alive = self.parser.should_keep_alive()
            self.transport.write(OK if keep_alive else OK_CLOSE)
            if not keep_alive:
                self.transport.close()
        else:
            self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")


async def serve(port: int, counters: Counters) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(counters), LOOPBACK, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--verify-every", type=int, default=100, help="check the signature of every n-th")
    args = parser.parse_args()
    secret = os.environ.get(SECRET_ENV)
    if not secret:
        parser.error(f"the webhook's whsec_ secret goes in {SECRET_ENV}")
    counters = Counters(Webhook(secret), max(1, args.verify_every))
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.port, counters))
    else:
        uvloop.run(serve(args.port, counters))


if __name__ == "__main__":
    main()
