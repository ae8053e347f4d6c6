"""A subscriber's endpoint for tests: a real HTTP server on loopback that records what it is sent.

Each path is its own endpoint; `answer(path, 500, 500)` makes the next two requests to it fail, after
which it answers 200 again.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from support.harness import wait_for
from wagate.simulator.server import RunningServer, run_in_thread


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered
    at: float  # time.time()

    @property
    def json(self) -> dict[str, Any]:
        value: dict[str, Any] = orjson.loads(self.body)
        return value


class Receiver:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: dict[str, list[Received]] = defaultdict(list)
        self._answers: dict[str, deque[int]] = defaultdict(deque)
        self._slow: dict[str, float] = {}
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["POST"])])
        self.server: RunningServer = run_in_thread(app)

    async def _handle(self, request: Request) -> Response:
        path = request.path_params["path"]
        body = await request.body()
        with self._lock:
            answers = self._answers[path]
            status = answers.popleft() if answers else 200
            slow = self._slow.get(path, 0.0)
        if slow:
            await asyncio.sleep(slow)
        with self._lock:
            self._received[path].append(Received(path, dict(request.headers), body, status, time.time()))
        return Response(b"ok" if status < 300 else b"receiver says no", status_code=status)

    def url(self, path: str) -> str:
        return f"{self.server.base_url}/{path}"

    def answer(self, path: str, *statuses: int) -> None:
        with self._lock:
            self._answers[path].extend(statuses)

    def slow_down(self, path: str, seconds: float) -> None:
        """Answer requests to `path` only after `seconds`."""
        with self._lock:
            self._slow[path] = seconds

    def answer_ok(self, path: str) -> None:
        """Forget the failures still queued for `path`: it answers 200 from now on."""
        with self._lock:
            self._answers[path].clear()

    def received(self, path: str) -> list[Received]:
        with self._lock:
            return list(self._received[path])

    def wait(self, path: str, count: int, *, timeout: float = 10.0) -> list[Received]:
        def enough() -> list[Received] | None:
            got = self.received(path)
            return got if len(got) >= count else None

        return wait_for(
            enough,
            timeout=timeout,
            what=f"{count} requests to /{path}",
        )

    def stop(self) -> None:
        self.server.stop()
