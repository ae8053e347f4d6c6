"""`wagate worker`: the dispatcher without the API, for deployments with several processes."""

from __future__ import annotations

import asyncio
import signal

from wagate.api.process import GatewayProcess
from wagate.core.config import Settings
from wagate.observability.metrics import Metrics


async def run_worker(settings: Settings) -> None:
    # A worker has no API port: its metrics, liveness and readiness are on a listener of its own
    # (`WAGATE_METRICS_PORT`).
    process = GatewayProcess.build(settings, Metrics(), dispatcher_runs=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        # What the worker commits (statuses, customer messages, send failures) reaches the dashboards
        # of the API processes by NOTIFY; a worker serves no page, so it does not listen.
        await process.start(dispatch=True, hear_live=False)
        await stop.wait()
    finally:
        await process.stop()
