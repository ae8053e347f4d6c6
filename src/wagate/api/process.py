"""What one gateway process runs, built, started and torn down in one place for `wagate serve`
(api/app.py's lifespan) and `wagate worker` (ops/worker.py): the database, the Cloud API client, the
secret box, the caches, the live changes, the dispatcher, its health checks and, when a
metrics port is set, the listener that answers them."""

from __future__ import annotations

from dataclasses import dataclass

from wagate.api.health import HealthChecks, OpsListener
from wagate.core.cache import Caches
from wagate.core.config import Settings
from wagate.core.db import Database
from wagate.core.live_hub import LiveHub
from wagate.core.security import SecretBox, secret_box_for
from wagate.dispatch.dispatcher import Dispatcher
from wagate.http.limits import KeyRateLimiter
from wagate.http.serving import settle_heap
from wagate.observability.metrics import Metrics
from wagate.runtime.gateway import Gateway
from wagate.whatsapp.client import CloudApiClient


@dataclass
class GatewayProcess:
    settings: Settings
    db: Database
    client: CloudApiClient
    secret_box: SecretBox
    caches: Caches
    live: LiveHub
    metrics: Metrics
    dispatcher: Dispatcher
    checks: HealthChecks
    listener: OpsListener | None = None

    @classmethod
    def build(cls, settings: Settings, metrics: Metrics, *, dispatcher_runs: bool) -> GatewayProcess:
        """Everything made, nothing started: `dispatcher_runs` says whether readiness counts the
        dispatcher (a `serve --no-dispatcher` still makes one, for its interface, and never starts it)."""
        db = Database(settings.database_url)
        client = CloudApiClient(settings.graph_api_url, timeout=settings.upstream_timeout_seconds)
        secret_box = secret_box_for(settings)
        caches = Caches(db)
        dispatcher = Dispatcher(
            db=db, settings=settings, client=client, secret_box=secret_box, caches=caches, metrics=metrics
        )
        checks = HealthChecks(db, metrics, dispatcher, dispatcher_runs=dispatcher_runs)
        return cls(settings, db, client, secret_box, caches, LiveHub(db), metrics, dispatcher, checks)

    def gateway(self) -> Gateway:
        """The runtime value the services, the pages and the handlers of this process take."""
        key_rates = KeyRateLimiter(self.settings.api_key_requests_per_second, self.settings.api_key_burst)
        return Gateway(
            self.db,
            self.settings,
            self.secret_box,
            self.client,
            self.caches,
            self.dispatcher,
            self.dispatcher.rooms,
            self.live,
            key_rates,
        )

    async def start(self, *, dispatch: bool, hear_live: bool) -> None:
        """`hear_live`: listen for what other processes commit (PostgreSQL), for the pages a serving
        process shows; a worker serves none, and what it commits reaches the others by NOTIFY."""
        if hear_live:
            await self.live.start()
        if dispatch:
            self.dispatcher.start()
        if self.settings.metrics_port:
            self.listener = OpsListener(self.checks, self.settings)
            await self.listener.start()
        # What exists after start-up lives as long as the process: keep it out of the collector's
        # full passes, which otherwise stall every request (and every send due meanwhile) for tens of
        # milliseconds now and then: 120 ms of CPU over a worker's start-up heap
        # (tests/dispatch/test_scale_out.py).
        settle_heap()

    async def stop(self) -> None:
        if self.listener is not None:
            await self.listener.stop()
        await self.dispatcher.stop()
        await self.live.stop()
        await self.client.close()
        await self.db.dispose()
