"""The Cloud API simulator: a separate ASGI app that behaves like Meta's WhatsApp Cloud API.

Point the gateway's adapter at ``http://HOST:PORT/v23.0``. It answers sends with ``wamid.`` ids,
sends HMAC-signed status webhooks back to ``webhook_url``, lists templates with cursor paging, and
fails the way Meta does: on magic recipient numbers (:mod:`wagate.simulator.magic`) and on switches
set through the ``/_sim/`` control endpoints (:mod:`wagate.simulator.control`).

A phone_number_id that was never registered through ``POST /_sim/channels`` gets a WABA of its own
(with the same id), seeded with :mod:`wagate.simulator.templates`; register channels so that sends
and template listings of one WABA see the same templates.
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from starlette.types import Receive, Scope, Send

from wagate.simulator.config import SimulatorConfig
from wagate.simulator.control import build_control_router
from wagate.simulator.control_customers import build_customer_router
from wagate.simulator.control_routing import build_routing_router
from wagate.simulator.control_templates import build_template_router
from wagate.simulator.graph import SendHandler, build_graph_router, build_send_handler
from wagate.simulator.state import SimulatorState
from wagate.simulator.webhooks import WebhookSender


class SimulatorApp(FastAPI):
    """FastAPI, except for a send (`POST /{version}/{phone_number_id}/messages`), which goes straight
    to its handler: every benchmark sends hundreds a second, and on a 2-core machine the CPU the
    simulator spends in FastAPI's matching of its many routes and its layers around a route (a third
    of each send's) is taken from the gateway under test (docs/performance.md)."""

    send_handler: SendHandler | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.send_handler is not None and scope["type"] == "http" and scope["method"] == "POST":
            # "", version, phone_number_id, "messages": as the route's path, whose segments are [^/]+
            parts = scope["path"].split("/")
            if len(parts) == 4 and parts[3] == "messages" and parts[1] and parts[2] and parts[1] != "_sim":
                response = await self.send_handler(parts[2], Request(scope, receive))
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def create_simulator_app(config: SimulatorConfig | None = None) -> SimulatorApp:
    state = SimulatorState(config or SimulatorConfig())
    sender = WebhookSender(state)
    send_handler = build_send_handler(state, sender)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            # Pending webhook tasks belong to this loop; stop them before it goes away.
            await sender.close()

    app = SimulatorApp(
        title="wagate Cloud API simulator",
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        telemetry={"tracing": False, "metrics": False, "logs": False},  # a test double: no telemetry
    )
    # Control routes first: "/_sim/..." must never be taken for a Graph API version segment.
    app.include_router(build_control_router(state, sender))
    app.include_router(build_customer_router(state, sender))
    app.include_router(build_routing_router(state, sender))
    app.include_router(build_template_router(state, sender))
    app.include_router(build_graph_router(state, sender, send_handler))
    app.send_handler = send_handler
    # For code running in the simulator's own loop (e.g. the sandbox); other threads use /_sim/.
    app.state.simulator = state
    app.state.webhook_sender = sender
    return app


def run_simulator(
    host: str = "127.0.0.1",
    port: int = 8090,
    webhook_url: str | None = None,
    app_secret: str = "simulator-app-secret",  # noqa: S107 - a fake Meta app, not a credential
    *,
    read_enabled: bool = False,
    log_level: str = "info",
) -> None:
    """Serve the simulator in the foreground until interrupted (the ``wagate simulator`` command)."""
    import uvicorn

    config = SimulatorConfig(webhook_url=webhook_url, app_secret=app_secret, read_enabled=read_enabled)
    app = create_simulator_app(config)
    # As in `wagate serve` and `wagate worker`: what exists now lives as long as the process, so keep
    # it out of the collector's full passes, which stall the loop and with it the receipt stamps.
    gc.freeze()
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_keep_alive=30)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="wagate simulator", description="Run the Cloud API simulator.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--webhook-url", default=None, help="the gateway's /webhooks/whatsapp URL")
    parser.add_argument("--app-secret", default="simulator-app-secret")
    parser.add_argument("--read", action="store_true", help="also send 'read' statuses")
    args = parser.parse_args(argv)
    run_simulator(args.host, args.port, args.webhook_url, args.app_secret, read_enabled=args.read)
