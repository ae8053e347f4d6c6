"""Since when Meta's webhooks reach the gateway is read from this database's API sessions only.

A dispatcher judges a send without a status only once an API process has been receiving Meta's
webhooks (its LISTEN session in `pg_stat_activity`). Another gateway's API process on the same
PostgreSQL server receives another's webhooks: counted, it made a restarted process resend sends
whose statuses were still on their way (two gateways, or two tests, on one server).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from cryptography.fernet import Fernet

from support.harness import postgres_admin_url
from wagate.api.process import GatewayProcess
from wagate.core.config import Settings
from wagate.core.live_hub import API_SESSION_PREFIX
from wagate.observability.metrics import Metrics


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture
def own_database(postgres_available: bool) -> Iterator[str]:
    if not postgres_available:
        pytest.skip("no PostgreSQL server (set WAGATE_TEST_POSTGRES_URL); CI runs these")
    name = "wagate_test_" + secrets.token_hex(4)
    with psycopg.connect(libpq(postgres_admin_url()), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{postgres_admin_url().rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(libpq(postgres_admin_url()), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_only_this_databases_api_sessions_count_as_receiving(own_database: str) -> None:
    settings = Settings(database_url=own_database, secret_key=Fernet.generate_key().decode())
    process = GatewayProcess.build(settings, Metrics(), dispatcher_runs=False)

    async def receiving_since() -> object:
        return await process.dispatcher._receiving_since(up_for=0)

    try:
        name = f"{API_SESSION_PREFIX}other-gateway"
        # Another database's API process, up all along: not this gateway's receiver.
        with psycopg.connect(libpq(postgres_admin_url()), application_name=name):
            assert asyncio.run(receiving_since()) is None
        # This database's: it is.
        with psycopg.connect(libpq(own_database), application_name=name):
            assert asyncio.run(receiving_since()) is not None
    finally:
        asyncio.run(process.db.dispose())
