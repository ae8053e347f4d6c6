"""What must not leak or pile up: request data in database errors and in stored errors, and a query for
every request that carries an unknown API key."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import event, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from support.app_in_thread import gateway_with_app, sql
from support.harness import Gateway, Simulator, wait_for
from wagate.core.db import Database
from wagate.core.migrate import migrate
from wagate.core.security import hash_api_token
from wagate.outbox.errors import describe_error
from wagate.whatsapp.errors import RecipientError

# What a message carries that must stay in the database: an OTP code, a phone number.
SECRET = "otp-918273-+994551234567"


@pytest.fixture(scope="module")
def migrated(database_url: str) -> str:
    migrate(database_url)
    return database_url


def failed_write(database_url: str, unit: Any) -> BaseException:
    """The exception `Database.write(unit)` raises, as the API or the dispatcher would get it."""

    async def scenario() -> BaseException:
        db = Database(database_url, pool_size=1)
        try:
            await db.write(unit)
        except Exception as exc:
            return exc
        finally:
            await db.dispose()
        raise AssertionError("the write did not fail")

    return asyncio.run(scenario())


def logged(exc: BaseException) -> str:
    """The text `log.exception` writes for it (message and traceback), as the app's handlers do."""
    traceback = logging.Formatter().formatException((type(exc), exc, exc.__traceback__))
    return f"{traceback}\n{exc}\n{exc!r}"


def test_a_database_error_does_not_carry_the_statement_parameters(migrated: str) -> None:
    def unit(session: Session) -> None:
        # An answer stored for an API key that does not exist: the foreign key refuses it.
        session.execute(
            text(
                "INSERT INTO idempotency_keys (api_key_id, key, request_hash, response_status, response_body,"
                " created_at, expires_at) VALUES (987654321, 'k', 'h', 201, :body, :at, :at)"
            ),
            {"body": '{"code": "' + SECRET + '"}', "at": "2030-01-01 00:00:00"},
        )

    exc = failed_write(migrated, unit)
    assert isinstance(exc, IntegrityError), repr(exc)
    assert SECRET not in logged(exc)
    assert "INSERT INTO idempotency_keys" in str(exc), "the statement itself is still named"


def test_a_stored_error_names_the_error_not_the_data(migrated: str) -> None:
    """What goes into `outbox.last_error` (a job that failed, to be retried): the kind of error, never
    the request's data, whatever the error's own text holds (PostgreSQL repeats a duplicate key's value)."""
    table = "leak_probe_" + secrets.token_hex(4)
    sql(migrated, f"CREATE TABLE {table} (id VARCHAR(64) PRIMARY KEY)")

    def unit(session: Session) -> None:
        for _ in range(2):
            session.execute(text(f"INSERT INTO {table} (id) VALUES (:id)"), {"id": SECRET})  # noqa: S608

    database = failed_write(migrated, unit)
    if not migrated.startswith("sqlite"):
        assert SECRET in repr(database), "PostgreSQL's own text repeats the duplicate key's value"
    upstream = RecipientError("Recipient not allowed", code=131030, details=f"number {SECRET} not allowed")
    for exc, kind in [
        (database, "IntegrityError"),
        (upstream, "RecipientError: 131030: Recipient not allowed"),
        (ValueError(f"no conversation for {SECRET}"), "ValueError"),
        (KeyError(SECRET), "KeyError"),
    ]:
        stored = describe_error(exc)
        assert SECRET not in stored and "918273" not in stored, stored
        assert kind in stored and len(stored) <= 300, stored


@pytest.fixture(scope="module")
def app_gateway(database_url: str, simulator: Simulator) -> Iterator[tuple[Gateway, FastAPI]]:
    with gateway_with_app(database_url, simulator, run_dispatcher=False) as running:
        yield running


def count_key_lookups(app: FastAPI) -> list[str]:
    """Every statement the app's read engine runs on api_keys, from now on."""
    seen: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "api_keys" in statement:
            seen.append(statement)

    event.listen(app.state.gateway.db.engine.sync_engine, "before_cursor_execute", before)
    return seen


def test_an_unknown_key_costs_one_lookup_not_one_per_request(app_gateway: tuple[Gateway, FastAPI]) -> None:
    gateway, app = app_gateway
    lookups = count_key_lookups(app)
    token = "wg_unknown_" + secrets.token_hex(16)
    url = gateway.v1("/whatsapp/channels")
    answers = [gateway.http.get(url, headers=gateway.headers(token)).status_code for _ in range(100)]
    assert answers == [401] * 100
    assert len(lookups) == 1, f"{len(lookups)} lookups of api_keys for 100 requests with one unknown key"


def test_a_key_created_after_it_was_refused_works_within_seconds(
    app_gateway: tuple[Gateway, FastAPI],
) -> None:
    """Provisioning runs in another process: this one learns of the key only from the database."""
    gateway, _ = app_gateway
    token = "wg_new_" + secrets.token_hex(16)
    url = gateway.v1("/whatsapp/channels")
    assert gateway.http.get(url, headers=gateway.headers(token)).status_code == 401
    (admin,) = sql(gateway.database_url, "SELECT user_id, account_id FROM api_keys WHERE name = 'crm'")
    sql(
        gateway.database_url,
        "INSERT INTO api_keys (account_id, user_id, name, token_hash, token_prefix, created_at)"
        " VALUES (:account, :user, :name, :hash, 'wg_new_', :at)",
        account=admin[1],
        user=admin[0],
        name="created-" + token[-6:],
        hash=hash_api_token(token),
        at="2030-01-01 00:00:00",
    )
    began = time.monotonic()
    wait_for(
        lambda: gateway.http.get(url, headers=gateway.headers(token)).status_code == 200,
        timeout=10,
        interval=0.2,
        what="the new key accepted",
    )
    assert time.monotonic() - began <= 6.0
