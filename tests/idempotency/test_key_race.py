"""API.md: a repeat of a request with the same Idempotency-Key sends nothing, and gets the first answer.

The race the contract must survive: our request found no stored answer for its key, and before it
stores its own, another process (the client's retry, sent to another gateway behind the same load
balancer) commits one for the same key. The key's row decides: ours stores nothing and answers as a
repeat would (the other's response, or 422 if the bodies differ). Here "another process" is the test
committing that row on a connection of its own at the moment the request's write starts, so the race
happens every time, on SQLite as on PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI

from support.app_in_thread import gateway_with_app, sql
from support.harness import Gateway, Simulator, new_number
from wagate.core.db import Database


@pytest.fixture(scope="module")
def app_gateway(database_url: str, simulator: Simulator) -> Iterator[tuple[Gateway, FastAPI]]:
    # No dispatcher: every write of the process is the API's, so the race lands on the request's own.
    with gateway_with_app(database_url, simulator, run_dispatcher=False) as running:
        yield running


COPY_KEY = """
INSERT INTO idempotency_keys
    (api_key_id, key, request_hash, response_status, response_body, created_at, expires_at)
SELECT api_key_id, :target, COALESCE(:body_hash, request_hash), response_status, response_body,
    created_at, expires_at
FROM idempotency_keys WHERE key = :source
"""


def race_next_write(
    monkeypatch: pytest.MonkeyPatch, db: Database, source: str, target: str, body_hash: str | None = None
) -> None:
    """Just before the next unit of work reaches the writer, another process commits its answer for
    the key `target`: the one stored for `source`, a request with the same body (or, given
    `body_hash`, another body)."""
    write = db.write

    async def racing(unit: Any, **options: Any) -> Any:
        monkeypatch.setattr(db, "write", write)
        await asyncio.to_thread(sql, db.url, COPY_KEY, source=source, target=target, body_hash=body_hash)
        return await write(unit, **options)

    monkeypatch.setattr(db, "write", racing)


def messages_to(gateway: Gateway, number: str) -> list[str]:
    rows = sql(gateway.database_url, "SELECT id FROM messages WHERE phone_number = :number", number=number)
    return [row[0] for row in rows]


def test_a_key_stored_meanwhile_by_another_process_answers_the_request(
    app_gateway: tuple[Gateway, FastAPI], monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, app = app_gateway
    number = new_number()
    body = {"phone_number": number, "template": {"name": "otp_code", "language": "en", "parameters": ["77"]}}
    first = gateway.send(body, **{"Idempotency-Key": "race-first"})
    assert first.status_code == 201, first.text

    # The other process's request had the same body and stored its answer first: that is ours.
    race_next_write(monkeypatch, app.state.gateway.db, "race-first", "race-same")
    replay = gateway.send(body, **{"Idempotency-Key": "race-same"})
    assert replay.status_code == 201, replay.text
    assert replay.json() == first.json()
    assert messages_to(gateway, number) == [first.json()["id"]], "the request stored a message of its own"

    # The other's body differed: 422, as for any repeat with another body, and still nothing stored.
    race_next_write(monkeypatch, app.state.gateway.db, "race-first", "race-other", body_hash="0" * 64)
    reused = gateway.send(body, **{"Idempotency-Key": "race-other"})
    assert reused.status_code == 422, reused.text
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    assert messages_to(gateway, number) == [first.json()["id"]]
    stored = sql(gateway.database_url, "SELECT request_hash FROM idempotency_keys WHERE key = 'race-other'")
    assert stored == [("0" * 64,)], "the other process's answer was replaced"


def test_a_bulk_batch_races_the_same_way(
    app_gateway: tuple[Gateway, FastAPI], monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, app = app_gateway
    numbers = [new_number(), new_number()]
    body = {
        "channel_id": gateway.ids["main"],
        "template": {"name": "otp_code", "language": "en", "parameters": ["88"]},
        "phone_numbers": numbers,
    }
    url, headers = gateway.v1("/whatsapp/bulk_messages"), gateway.headers()
    first = gateway.http.post(url, json=body, headers={**headers, "Idempotency-Key": "bulk-first"})
    assert first.status_code == 202, first.text

    race_next_write(monkeypatch, app.state.gateway.db, "bulk-first", "bulk-same")
    replay = gateway.http.post(url, json=body, headers={**headers, "Idempotency-Key": "bulk-same"})
    assert replay.status_code == 202, replay.text
    assert replay.json() == first.json()
    assert all(len(messages_to(gateway, n)) == 1 for n in numbers), "the batch was stored twice"
