"""What an operator asks a process: is it ready (`/readyz`), and what does it count (`/metrics`).

The API process answers on its own port (api/app.py); a worker, which has no API, and any process given a
metrics port answer on a listener of their own (`ops_listener`), bound to loopback by default. Both ask
the same functions here, so the answers cannot differ between them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import uvicorn
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from wagate.core.config import Settings
from wagate.core.db import Database, utcnow
from wagate.core.errors import NotReady
from wagate.core.migrate import head_revision
from wagate.dispatch.dispatcher import Dispatcher
from wagate.http.responses import FastJSONResponse as JSONResponse
from wagate.http.serving import SideServer, uvicorn_options
from wagate.observability.metrics import CONTENT_TYPE, Metrics
from wagate.outbox.depth import lane_depths

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Readiness:
    problem: str | None  # None: ready
    schema: str | None
    dispatcher: str

    def response(self) -> JSONResponse:
        if self.problem is not None:
            error = NotReady(self.problem, headers={"Retry-After": "1"})
            return JSONResponse(error.body(), status_code=error.status_code, headers=error.headers)
        return JSONResponse({"status": "ready", "schema": self.schema, "dispatcher": self.dispatcher})


class HealthChecks:
    """Readiness and metrics of one process; `dispatcher_runs`: whether this process runs its
    dispatcher (`serve`, a worker), so readiness requires it alive."""

    def __init__(
        self, db: Database, metrics: Metrics, dispatcher: Dispatcher, *, dispatcher_runs: bool
    ) -> None:
        self.db = db
        self.metrics = metrics
        self.dispatcher = dispatcher
        self.dispatcher_runs = dispatcher_runs
        self.schema_head = head_revision()  # read once: the files do not change under a running process

    async def readiness(self) -> Readiness:
        """Ready when the database answers, its schema is the one this code needs, and the dispatcher
        runs where this process runs one."""
        dispatcher = "running" if self.dispatcher_runs else "not in this process"
        try:
            async with self.db.read() as session:
                await session.execute(text("SELECT 1"))
                try:
                    schema = (await session.execute(text("SELECT version_num FROM alembic_version"))).scalar()
                except DBAPIError:  # the database answers, but was never migrated
                    schema = None
        except Exception as exc:
            log.warning("readiness check failed: %r", exc)
            return Readiness("The database cannot be reached.", None, dispatcher)
        if schema != self.schema_head:
            problem = (
                f"The database schema is at {schema or 'nothing'}, this code needs {self.schema_head}:"
                " run `wagate migrate`."
            )
            return Readiness(problem, schema, dispatcher)
        if self.dispatcher_runs and not self.dispatcher.running:
            return Readiness("The dispatcher of this process has stopped: restart it.", schema, dispatcher)
        return Readiness(None, schema, dispatcher)

    async def metrics_text(self) -> bytes:
        """The counters as they stand, with the gauges read now: the outbox from the database (left
        out while it cannot be read: a missing series says so better than a stale one) and the rate in
        use of each channel this process paces."""
        try:
            async with self.db.read() as session:
                depths = await lane_depths(session, utcnow())
            self.metrics.set_outbox(depths, sum(d.depth for d in depths if d.lane == "deliver_event"))
        except Exception as exc:
            log.warning("metrics: the outbox could not be read: %r", exc)
            self.metrics.set_outbox([], 0)
            self.metrics.event_backlog.set(float("nan"))
        self.metrics.set_channel_rates(self.dispatcher.channel_rates())
        return self.metrics.render()


def ops_app(checks: HealthChecks) -> Starlette:
    """The operator's listener: /metrics, /healthz and /readyz, nothing else, no authentication (it is
    bound to loopback unless `WAGATE_METRICS_HOST` says otherwise)."""

    async def metrics(_: Request) -> Response:
        return Response(await checks.metrics_text(), media_type=CONTENT_TYPE)

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> JSONResponse:
        return (await checks.readiness()).response()

    routes = [Route("/metrics", metrics), Route("/healthz", healthz), Route("/readyz", readyz)]
    return Starlette(routes=routes)


class OpsListener:
    """`ops_app` served in this process's event loop on `settings.metrics_host:port`."""

    def __init__(self, checks: HealthChecks, settings: Settings) -> None:
        options: dict[str, Any] = {**uvicorn_options(settings), "lifespan": "off"}
        host, port = settings.metrics_host, settings.metrics_port
        config = uvicorn.Config(ops_app(checks), host=host, port=port or 0, **options)
        self.server = SideServer(config)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.server.serve(), name="wagate-ops-listener")
        while not self.server.started:  # bound, or failed to bind (the task then holds the error)
            if self.task.done():
                await self.task
                raise RuntimeError(f"the metrics listener on port {self.server.config.port} did not start")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self.task is not None:
            self.server.should_exit = True
            await asyncio.gather(self.task, return_exceptions=True)
