"""A migrated, provisioned gateway in a thread (`running_gateway`), or with its app at hand.

For tests that must look inside the running process while they talk HTTP to it: count the queries
its engine runs, or put another process's write between two steps of a request. `sql` reads and
writes the same database beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
from cryptography.fernet import Fernet
from fastapi import FastAPI
from sqlalchemy import NullPool, create_engine, text

import wagate.runtime.gateway
from support.harness import APP_SECRET, VERIFY_TOKEN, Gateway, Simulator, provision_file
from wagate.api.app import create_app
from wagate.api.process import GatewayProcess
from wagate.core.config import Settings
from wagate.core.migrate import migrate, sync_url
from wagate.http.serving import guarded_protocol
from wagate.observability.metrics import Metrics
from wagate.ops.operations import run_provision
from wagate.ops.provisioning import ProvisionFile
from wagate.simulator.server import serve_in_background, start_in_thread


def gateway_settings(
    database_url: str, simulator: Simulator, secret_key: str, **overrides: object
) -> Settings:
    return Settings(
        database_url=database_url,
        graph_api_url=simulator.graph_url,
        meta_app_secret=APP_SECRET,
        meta_verify_token=VERIFY_TOKEN,
        secret_key=secret_key,
        unconfirmed_send_grace_seconds=3.0,
        upstream_timeout_seconds=2.0,
        **overrides,  # type: ignore[arg-type]
    )


def _ids(provisioned: dict[str, Any]) -> dict[str, int]:
    """Channel ids by lower-case name, and the two accounts' ids, of `provision_file()`."""
    accounts = {a["name"]: a for a in provisioned["accounts"]}
    ids = {c["name"].lower(): c["channel_id"] for a in accounts.values() for c in a["channels"]}
    ids["globex_channel"] = accounts["Globex"]["channels"][0]["channel_id"]
    ids.update(acme=accounts["Acme"]["account_id"], globex=accounts["Globex"]["account_id"])
    return ids


@contextmanager
def gateway_with_app(
    database_url: str,
    simulator: Simulator,
    spec: dict[str, Any] | None = None,
    secret_key: str | None = None,
    *,
    run_dispatcher: bool = True,
    wire_simulator: bool = False,
    **settings: Any,
) -> Iterator[tuple[Gateway, FastAPI]]:
    """The gateway and its app object. Give the same `secret_key` to start a gateway again on the
    same database (a restart); `wire_simulator` aims the simulator's webhooks at it."""
    config = gateway_settings(
        database_url, simulator, secret_key or Fernet.generate_key().decode(), **settings
    )
    migrate(database_url)
    spec_file = ProvisionFile.model_validate(spec or provision_file())
    # In a thread of its own: the browser tests' Playwright keeps an event loop running in this one.
    with ThreadPoolExecutor(1) as provisioner:
        provisioned = provisioner.submit(asyncio.run, run_provision(config, spec_file)).result()
    ids = _ids(provisioned)
    app = create_app(config, run_dispatcher=run_dispatcher)
    url, stop = start_in_thread(app, http=guarded_protocol(config))
    if wire_simulator:
        simulator.configure(webhook_url=f"{url}/webhooks/whatsapp")
    try:
        with httpx.Client(timeout=10) as http:
            yield Gateway(url, http, simulator, database_url, ids), app
    finally:
        stop()


@contextmanager
def running_gateway(
    database_url: str,
    simulator: Simulator,
    spec: dict[str, Any] | None = None,
    secret_key: str | None = None,
    **settings: Any,
) -> Iterator[Gateway]:
    """A migrated, provisioned gateway on a loopback port, the simulator's webhooks aimed at it.

    Give the same `secret_key` to start a gateway again on the same database (a restart).
    """
    with gateway_with_app(database_url, simulator, spec, secret_key, wire_simulator=True, **settings) as (
        gateway,
        _,
    ):
        yield gateway


def sql(database_url: str, statement: str, **params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on a connection of the test's own and commit: a read of what the gateway
    stored, or a write as another process would make it."""
    engine = create_engine(sync_url(database_url), poolclass=NullPool)
    try:
        with engine.begin() as connection:
            result = connection.execute(text(statement), params)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


@asynccontextmanager
async def services_only(
    database_url: str, simulator: Simulator, **settings: Any
) -> AsyncIterator[tuple[wagate.runtime.gateway.Gateway, dict[str, int]]]:
    """The `Gateway` value of a process built as `wagate serve` builds it, with no HTTP server and no
    dispatcher running (sends are stored ready, as for a process that does not own the channel): for
    tests of a service function called directly. Meta is the simulator, which provisioning asks for
    the templates."""
    config = gateway_settings(database_url, simulator, Fernet.generate_key().decode(), **settings)
    migrate(database_url)
    ids = _ids(await run_provision(config, ProvisionFile.model_validate(provision_file())))
    process = GatewayProcess.build(config, Metrics(), dispatcher_runs=False)
    try:
        yield process.gateway(), ids
    finally:
        await process.stop()


@asynccontextmanager
async def gateway_in_this_loop(
    database_url: str, simulator: Simulator, **settings: Any
) -> AsyncIterator[tuple[str, wagate.runtime.gateway.Gateway, dict[str, int]]]:
    """The gateway served as a task of the running loop: its URL, the `Gateway` its handlers get, and
    the ids. For tests that take an action through a service function (as the dashboard will) and
    check over HTTP what the API makes of it."""
    config = gateway_settings(database_url, simulator, Fernet.generate_key().decode(), **settings)
    migrate(database_url)
    ids = _ids(await run_provision(config, ProvisionFile.model_validate(provision_file())))
    app = create_app(config)
    server, task = await serve_in_background(app, http=guarded_protocol(config))
    try:
        yield f"http://127.0.0.1:{server.config.port}", app.state.gateway, ids
    finally:
        server.should_exit = True
        await task
