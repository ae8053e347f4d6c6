"""`wagate worker`: the dispatcher without the API, for deployments with several processes."""

from __future__ import annotations

import asyncio
import signal

from wagate.api.health import HealthChecks, OpsListener
from wagate.core.config import Settings
from wagate.core.db import Database
from wagate.core.live import LiveHub
from wagate.core.security import secret_box_for
from wagate.dispatch.dispatcher import Dispatcher
from wagate.http.serving import settle_heap
from wagate.observability.metrics import Metrics
from wagate.whatsapp.client import CloudApiClient


async def run_worker(settings: Settings) -> None:
    db = Database(settings.database_url)
    # What the worker commits (statuses, customer messages, send failures) reaches the dashboards of
    # the API processes by NOTIFY; a worker serves no page, so it does not listen.
    live = LiveHub(db)
    client = CloudApiClient(settings.graph_api_url, timeout=settings.upstream_timeout_seconds)
    metrics = Metrics()
    dispatcher = Dispatcher(
        db=db, settings=settings, client=client, secret_box=secret_box_for(settings), metrics=metrics
    )
    # A worker has no API port: its metrics, liveness and readiness are on a listener of its own.
    listener = None
    if settings.metrics_port:
        listener = OpsListener(HealthChecks(db, metrics, dispatcher, dispatcher_runs=True), settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    dispatcher.start()
    try:
        if listener is not None:
            await listener.start()
        # As in `wagate serve` (api/app.py): what exists after start-up lives as long as the process, so
        # keep it out of the collector's full passes. Without this a full pass over the worker's
        # start-up heap held its event loop for 120 ms of CPU (a quarter of a second on a busy
        # machine), and every send due meanwhile waited (tests/dispatch/test_scale_out.py).
        settle_heap()
        await stop.wait()
    finally:
        if listener is not None:
            await listener.stop()
        await dispatcher.stop()
        await live.stop()
        await client.close()
        await db.dispose()
