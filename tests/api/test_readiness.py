"""`/readyz` (issue 15, point 4): ready only when the database answers, its schema is the one the code
needs, and the dispatcher runs where the process runs one; otherwise 503 `not_ready` saying which, so a
load balancer or an orchestrator keeps traffic away and an operator knows what to do."""

from __future__ import annotations

import asyncio

import httpx

from support.app_in_thread import gateway_in_this_loop, sql
from support.harness import Gateway, Simulator
from wagate.core.migrate import head_revision


def test_ready_names_the_schema_and_the_dispatcher(gateway: Gateway) -> None:
    ready = gateway.http.get(f"{gateway.url}/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"status": "ready", "schema": head_revision(), "dispatcher": "running"}


def test_a_schema_behind_the_code_is_not_ready_until_migrated(gateway: Gateway) -> None:
    head = head_revision()
    sql(gateway.database_url, "UPDATE alembic_version SET version_num = '0013'")
    try:
        answer = gateway.http.get(f"{gateway.url}/readyz")
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "1"
        error = answer.json()["error"]
        assert error["code"] == "not_ready"
        assert "0013" in error["message"] and head in error["message"], error
        assert "wagate migrate" in error["message"]
    finally:
        sql(gateway.database_url, "UPDATE alembic_version SET version_num = :head", head=head)
    assert gateway.http.get(f"{gateway.url}/readyz").status_code == 200


def test_a_stopped_dispatcher_is_not_ready(database_url: str, simulator: Simulator) -> None:
    async def scenario() -> None:
        async with (
            gateway_in_this_loop(database_url, simulator) as (url, gateway, _),
            httpx.AsyncClient(base_url=url, timeout=10) as http,
        ):
            assert (await http.get("/readyz")).status_code == 200
            await gateway.dispatcher.stop()  # type: ignore[attr-defined]
            answer = await http.get("/readyz")
            assert answer.status_code == 503
            assert "dispatcher" in answer.json()["error"]["message"]

    asyncio.run(scenario())


def test_a_database_never_migrated_is_not_ready_and_says_to_migrate(gateway: Gateway) -> None:
    # As a database that answers but holds no schema: the version table is out of sight.
    sql(gateway.database_url, "ALTER TABLE alembic_version RENAME TO alembic_version_aside")
    try:
        answer = gateway.http.get(f"{gateway.url}/readyz")
        assert answer.status_code == 503, answer.text
        message = answer.json()["error"]["message"]
        assert "at nothing" in message and "wagate migrate" in message, message
    finally:
        sql(gateway.database_url, "ALTER TABLE alembic_version_aside RENAME TO alembic_version")
    assert gateway.http.get(f"{gateway.url}/readyz").status_code == 200
