"""A running simulator plus a webhook receiver that checks Meta's signature, both on real sockets.

A uniquely named module (not conftest.py) so that test modules can import its helpers without
clashing with any other conftest on sys.path; conftest.py only re-exports the fixture.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from wagate.simulator import (
    RunningServer,
    SimulatorConfig,
    StatusDelays,
    create_simulator_app,
    run_in_thread,
)
from wagate.whatsapp.signature import SIGNATURE_HEADER, verify

APP_SECRET = "test-app-secret"
PHONE_NUMBER_ID = "106540352242922"
WABA_ID = "102290129340398"
TOKEN = "token"


class Receiver:
    """Records every webhook POSTed to ``/hook``; answers 401 to a bad signature, like the gateway."""

    def __init__(self, secret: str = APP_SECRET) -> None:
        self.secret = secret
        self.bodies: list[dict[str, Any]] = []
        self.bad_signatures = 0
        self.reply_status = 200
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])

    async def _hook(self, request: Request) -> Response:
        raw = await request.body()
        if not verify(self.secret, raw, request.headers.get(SIGNATURE_HEADER)):
            with self._lock:
                self.bad_signatures += 1
            return Response(status_code=401)
        with self._lock:
            if self.reply_status == 200:
                self.bodies.append(json.loads(raw))
        return Response(status_code=self.reply_status)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.bodies)

    def statuses(self, wamid: str | None = None) -> list[dict[str, Any]]:
        found = []
        for body in self.snapshot():
            for entry in body["entry"]:
                for change in entry["changes"]:
                    for status in change["value"].get("statuses", []):
                        if wamid is None or status["id"] == wamid:
                            found.append(status)
        return found

    def wait_for(
        self, predicate: Callable[[Receiver], bool], timeout: float = 5.0, what: str = "webhooks"
    ) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; got {self.snapshot()}")
            time.sleep(0.01)


@dataclass
class Harness:
    sim: RunningServer
    receiver: Receiver
    receiver_server: RunningServer
    http: httpx.Client

    @property
    def graph_url(self) -> str:
        return self.sim.base_url + "/v23.0"

    def control(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, self.sim.base_url + path, **kwargs)
        assert response.status_code == 200, response.text
        return response.json()

    def send(
        self, body: dict[str, Any], token: str = TOKEN, phone_number_id: str = PHONE_NUMBER_ID
    ) -> httpx.Response:
        return self.http.post(
            f"{self.graph_url}/{phone_number_id}/messages",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
        )


def fast_config(webhook_url: str | None) -> SimulatorConfig:
    return SimulatorConfig(
        webhook_url=webhook_url,
        app_secret=APP_SECRET,
        status_delays=StatusDelays(sent=0.01, delivered=0.03, read=0.05),
        webhook_retry_initial=0.05,
        webhook_retry_cap=0.2,
        slow_response_seconds=3.0,
    )


def register_test_channel(http: httpx.Client, simulator_url: str) -> None:
    """The channel every simulator test sends through (PHONE_NUMBER_ID of WABA_ID)."""
    http.post(
        simulator_url + "/_sim/channels",
        json={"phone_number_id": PHONE_NUMBER_ID, "waba_id": WABA_ID, "display_phone_number": "15550001111"},
    ).raise_for_status()


@pytest.fixture
def harness() -> Iterator[Harness]:
    receiver = Receiver()
    receiver_server = run_in_thread(receiver.app)
    sim = run_in_thread(create_simulator_app(fast_config(receiver_server.base_url + "/hook")))
    http = httpx.Client(timeout=10.0)
    try:
        register_test_channel(http, sim.base_url)
        yield Harness(sim=sim, receiver=receiver, receiver_server=receiver_server, http=http)
    finally:
        http.close()
        for server in (sim, receiver_server):
            server.request_stop()
        sim.stop()
        receiver_server.stop()
