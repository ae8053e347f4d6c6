"""How a response leaves the server: uvicorn's protocol as `wagate serve` runs it (`guarded_protocol`),
fed a request's bytes, writing to a transport that records each write (the network itself is
asyncio's; what is checked here is what the protocol hands it)."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from wagate.core.config import Settings
from wagate.http.serving import uvicorn_options

REQUEST = b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n"


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 8000) if name in ("sockname", "peername") else default


async def _serve_one(app: Any, transport: RecordingTransport, until: asyncio.Event) -> list[bytes]:
    config = uvicorn.Config(app, **uvicorn_options(Settings(log_level="warning")))
    config.load()
    protocol = config.http_protocol_class(config, ServerState(), {}, asyncio.get_running_loop())
    protocol.connection_made(transport)
    protocol.data_received(REQUEST)
    await asyncio.wait_for(until.wait(), 5)
    await asyncio.sleep(0)  # the turn in which the app's last write happened ends
    protocol.connection_lost(None)
    return transport.writes


def test_a_response_leaves_in_one_write_head_and_body_together() -> None:
    done = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        done.set()

    writes = asyncio.run(_serve_one(app, RecordingTransport(), done))
    assert len(writes) == 1, writes  # one syscall and one TCP segment, not two
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and writes[0].endswith(b"\r\n\r\nok")


def test_a_streamed_responses_head_is_not_held_while_its_body_is_not_ready() -> None:
    head_sent, body_ready, done = asyncio.Event(), asyncio.Event(), asyncio.Event()
    transport = RecordingTransport()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        head_sent.set()
        await body_ready.wait()
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        done.set()

    async def run() -> tuple[list[bytes], list[bytes]]:
        served = asyncio.create_task(_serve_one(app, transport, done))
        await head_sent.wait()
        await asyncio.sleep(0.01)  # turns of the loop go by with the body not ready yet
        before_body = list(transport.writes)
        body_ready.set()
        return before_body, await served

    before_body, writes = asyncio.run(run())
    assert len(before_body) == 1, before_body
    assert before_body[0].startswith(b"HTTP/1.1 200 OK\r\n") and before_body[0].endswith(b"\r\n\r\n")
    assert b"".join(writes[1:]) == b"9\r\ndata: 1\n\n\r\n0\r\n\r\n"


def test_a_head_held_when_the_connection_is_lost_in_the_same_turn_is_dropped_not_written() -> None:
    transport = RecordingTransport()
    done = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        transport.closing = True  # the client went away before the turn ended
        done.set()

    writes = asyncio.run(_serve_one(app, transport, done))
    assert writes == []  # a write on a closed uvloop transport raises in the loop's callback
