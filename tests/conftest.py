from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from support.app_in_thread import running_gateway
from support.harness import (
    APP_SECRET,
    GLOBEX,
    MAIN,
    SECOND,
    Gateway,
    Simulator,
    postgres_admin_url,
)
from support.receiver import Receiver
from wagate.simulator.app import create_simulator_app
from wagate.simulator.config import SimulatorConfig
from wagate.simulator.server import start_in_thread

BACKENDS = ["sqlite", "postgresql"]
# Tests that drive Chromium, and modules that run `wagate` processes of their own or generate input
# at length, are `slow`: `make test` runs them, `make test-fast` leaves them out.
BROWSER_FIXTURES = {"browser", "context", "page"}
GENERATED_AT_LENGTH = {
    "test_openapi_contract",
    "test_header_fuzz",
    "test_webhook_fuzz",
    "test_dashboard_fuzz",
}


def _runs_processes(module: object) -> bool:
    return any(
        getattr(value, "__module__", None) == "support.gateway_process"
        or getattr(value, "__name__", None) == "support.gateway_process"
        for value in vars(module).values()
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        if (
            BROWSER_FIXTURES & set(getattr(item, "fixturenames", ()))
            or (module is not None and _runs_processes(module))
            or (module is not None and module.__name__.rsplit(".", 1)[-1] in GENERATED_AT_LENGTH)
        ):
            item.add_marker(pytest.mark.slow)


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


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    with running_gateway(database_url, simulator) as running:
        yield running


@pytest.fixture(scope="module")
def receiver(database_url: str) -> Iterator[Receiver]:
    """A subscriber's endpoint on loopback: one per module and database backend, so that each sees only
    its own requests."""
    running = Receiver()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def delivering_gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    """A gateway that may deliver events to the loopback `receiver` (private URLs allowed)."""
    with running_gateway(database_url, simulator, allow_private_urls=True) as running:
        yield running


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The measured figures a test recorded as ("figures", line) user properties (the scale-out test's
    latency and rates), printed whether it passed or not: a passing test's own output is not shown."""
    lines = [
        f"{report.nodeid.rsplit('::', 1)[-1]}: {value}"
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for key, value in getattr(report, "user_properties", ())
        if key == "figures"
    ]
    if lines:
        terminalreporter.section("figures")
        for line in lines:
            terminalreporter.write_line(line)
