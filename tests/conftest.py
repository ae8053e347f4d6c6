from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from cryptography.fernet import Fernet

from support import (
    APP_SECRET,
    GLOBEX,
    MAIN,
    SECOND,
    VERIFY_TOKEN,
    Gateway,
    Simulator,
    postgres_admin_url,
    provision_file,
)
from wagate.accounts.provisioning import ProvisionFile
from wagate.app import create_app
from wagate.config import Settings
from wagate.migrate import migrate
from wagate.operations import run_provision
from wagate.simulator.app import create_simulator_app
from wagate.simulator.server import start_in_thread
from wagate.simulator.state import SimulatorConfig

BACKENDS = ["sqlite", "postgresql"]


def _postgres_available() -> bool:
    try:
        url = postgres_admin_url().replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(url, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


@pytest.fixture(scope="session")
def postgres_available() -> bool:
    available = _postgres_available()
    if not available and os.environ.get("CI") == "true":
        pytest.fail(
            "CI must run the database tests on PostgreSQL, but none answers at " + postgres_admin_url()
        )
    return available


def make_database(backend: str, tmp_dir: Path, postgres_available: bool) -> Iterator[str]:
    """A fresh, empty database of the given kind; dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_dir / 'wagate.db'}"
        return
    if not postgres_available:
        pytest.skip("no PostgreSQL server (set WAGATE_TEST_POSTGRES_URL); CI runs these")
    admin = postgres_admin_url().replace("postgresql+psycopg://", "postgresql://")
    name = "wagate_test_" + secrets.token_hex(4)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = postgres_admin_url().rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module", params=BACKENDS)
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, postgres_available: bool
) -> Iterator[str]:
    yield from make_database(request.param, tmp_path_factory.mktemp(request.param), postgres_available)


@pytest.fixture(scope="session")
def simulator() -> Iterator[Simulator]:
    url, stop = start_in_thread(
        create_simulator_app(SimulatorConfig(webhook_url=None, app_secret=APP_SECRET))
    )
    with httpx.Client(timeout=10) as http:
        for channel in (MAIN, SECOND, GLOBEX):
            http.post(f"{url}/_sim/channels", json=channel).raise_for_status()
        yield Simulator(url, http)
    stop()


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
    config = gateway_settings(
        database_url, simulator, secret_key or Fernet.generate_key().decode(), **settings
    )
    migrate(database_url)
    provisioned = asyncio.run(run_provision(config, ProvisionFile.model_validate(spec or provision_file())))
    accounts = {a["name"]: a for a in provisioned["accounts"]}
    ids = {c["name"].lower(): c["channel_id"] for a in accounts.values() for c in a["channels"]}
    ids["globex_channel"] = accounts["Globex"]["channels"][0]["channel_id"]
    ids.update(acme=accounts["Acme"]["account_id"], globex=accounts["Globex"]["account_id"])
    url, stop = start_in_thread(create_app(config))
    simulator.configure(webhook_url=f"{url}/webhooks/whatsapp")
    try:
        with httpx.Client(timeout=10) as http:
            yield Gateway(url, http, simulator, database_url, ids)
    finally:
        stop()


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    with running_gateway(database_url, simulator) as running:
        yield running
