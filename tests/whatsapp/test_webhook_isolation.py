"""A stored Meta webhook body that cannot be applied holds up no other body (issue 9, item 1).

It is tried alone a few times, then moved to the dead letters, which `wagate dead-letters` shows.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import httpx
import orjson
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import create_engine, func, select

from support.app_in_thread import gateway_settings, running_gateway
from support.harness import APP_SECRET, MAIN, Gateway, Simulator, new_number, wait_for
from wagate.api.app import create_app
from wagate.core.migrate import sync_url
from wagate.dispatch import jobs, webhook_jobs
from wagate.outbox.dead_letters import DeadLetter
from wagate.outbox.models import JobKind, OutboxJob
from wagate.outbox.retry import RetryPolicy
from wagate.simulator.magic import MAGIC_SERVER_ERROR
from wagate.simulator.server import start_in_thread
from wagate.whatsapp.signature import sign


def post_signed(url: str, body: dict[str, Any]) -> None:
    raw = orjson.dumps(body)
    response = httpx.post(
        f"{url}/webhooks/whatsapp",
        content=raw,
        headers={"X-Hub-Signature-256": sign(APP_SECRET, raw), "Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text


def webhook(value: dict[str, Any]) -> dict[str, Any]:
    metadata = {
        "display_phone_number": MAIN["display_phone_number"],
        "phone_number_id": MAIN["phone_number_id"],
    }
    change = {"field": "messages", "value": {"messaging_product": "whatsapp", "metadata": metadata, **value}}
    return {"object": "whatsapp_business_account", "entry": [{"id": MAIN["waba_id"], "changes": [change]}]}


def status_body(wamid: str, kind: str, to: str, **extra: Any) -> dict[str, Any]:
    status = {"id": wamid, "status": kind, "timestamp": str(int(time.time())), "recipient_id": to, **extra}
    return webhook({"statuses": [status]})


def customer_body(number: str, wamid: str, text: str) -> dict[str, Any]:
    digits = number.removeprefix("+")
    message = {
        "from": digits,
        "id": wamid,
        "timestamp": str(int(time.time())),
        "type": "text",
        "text": {"body": text},
    }
    return webhook({"contacts": [{"wa_id": digits, "profile": {"name": "Ann"}}], "messages": [message]})


def window_open(gateway: Gateway, number: str) -> bool:
    query = {"channel_id": gateway.ids["main"], "phone_number": number}
    response = gateway.http.get(
        gateway.v1("/whatsapp/messages/window"), params=query, headers=gateway.headers()
    )
    return bool(response.json()["open"])


def sent_message(gateway: Gateway) -> tuple[str, str, str]:
    """A message Meta accepted on channel Main: (message id, wamid, recipient digits)."""
    number = new_number()
    message_id = gateway.otp(number).json()["id"]
    message = wait_for(lambda: (m := gateway.message(message_id))["upstream_message_id"] and m, what="wamid")
    return message_id, message["upstream_message_id"], number.removeprefix("+")


@contextmanager
def receiver_only(database_url: str, simulator: Simulator, secret_key: str) -> Iterator[str]:
    """The gateway without its dispatcher: what it receives waits in the outbox."""
    url, stop = start_in_thread(
        create_app(gateway_settings(database_url, simulator, secret_key), run_dispatcher=False)
    )
    try:
        yield url
    finally:
        stop()


def dead_letters(database_url: str) -> list[dict[str, Any]]:
    """What an operator sees: `wagate dead-letters`, one JSON object a line, newest first."""
    env = {**os.environ, "WAGATE_DATABASE_URL": database_url, "WAGATE_LOG_LEVEL": "warning"}
    done = subprocess.run(
        [sys.executable, "-m", "wagate.ops.cli", "dead-letters", "--limit", "20"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def stored_webhooks(database_url: str) -> int:
    engine = create_engine(sync_url(database_url))
    try:
        with engine.connect() as connection:
            query = select(func.count()).select_from(OutboxJob).where(OutboxJob.kind == JobKind.meta_webhook)
            return int(connection.scalar(query) or 0)
    finally:
        engine.dispose()


@pytest.fixture
def manual_statuses(simulator: Simulator) -> Iterator[None]:
    simulator.configure(auto_statuses=False)
    try:
        yield
    finally:
        simulator.configure(auto_statuses=True)


@pytest.fixture
def retries_a_second_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries exactly a second apart: bodies that failed together are tried together again unless
    the dispatcher tells them apart (with the usual jitter they would drift apart by luck)."""
    monkeypatch.setattr(
        jobs, "BACKGROUND", RetryPolicy(max_attempts=50, base_delay=1.0, factor=1.0, jitter=0)
    )


class Poisoned(NamedTuple):
    message_id: str  # a sent message, with its wamid and number
    wamid: str
    to: str
    stranded: str  # a message whose send ended unknown (Meta answered 500): its wamid is unknown
    inbound_wamid: str  # a customer's message's wamid
    poison: dict[str, Any]  # a status giving `stranded` that wamid: no database takes a wamid twice


def sent_message_and_poison(gateway: Gateway) -> Poisoned:
    """A sent message, and a status body that cannot be applied (see `Poisoned`)."""
    customer, inbound_wamid = new_number(), f"wamid.customer.{secrets.token_hex(8)}"
    stranded = gateway.otp(MAGIC_SERVER_ERROR).json()["id"]
    message_id, wamid, to = sent_message(gateway)
    post_signed(gateway.url, customer_body(customer, inbound_wamid, "hello"))
    wait_for(lambda: window_open(gateway, customer), what="the customer's message")
    poison = status_body(inbound_wamid, "sent", to, biz_opaque_callback_data=stranded)
    return Poisoned(message_id, wamid, to, stranded, inbound_wamid, poison)


def buried_payloads(database_url: str) -> list[dict[str, Any]]:
    engine = create_engine(sync_url(database_url))
    try:
        with engine.connect() as connection:
            return list(connection.scalars(select(DeadLetter.payload)))
    finally:
        engine.dispose()


def buried(database_url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The dead letter of `body`, once the dispatcher has given up on it, as `wagate dead-letters`
    shows it. Waited for in the table, then read once through the command: a command started for
    every poll took seconds each on a busy machine."""
    wait_for(
        lambda: body in buried_payloads(database_url),
        timeout=20,
        interval=0.2,
        what="the body in the dead letters",
    )
    [letter] = [d for d in dead_letters(database_url) if d["payload"] == body]
    return letter


def test_a_body_that_cannot_be_applied_holds_up_nothing_and_is_buried(
    database_url: str, simulator: Simulator, manual_statuses: None, retries_a_second_apart: None
) -> None:
    key = Fernet.generate_key().decode()
    with running_gateway(database_url, simulator, secret_key=key) as gateway:
        message_id, wamid, to, stranded, inbound_wamid, poison = sent_message_and_poison(gateway)

    # The poison, then good bodies; all wait, so that the next dispatcher claims them in one batch.
    other_customer = new_number()
    with receiver_only(database_url, simulator, key) as url:
        post_signed(url, poison)
        post_signed(url, status_body(wamid, "delivered", to))
        post_signed(url, status_body(wamid, "read", to))
        post_signed(url, customer_body(other_customer, f"wamid.customer.{secrets.token_hex(8)}", "hi"))
    assert stored_webhooks(database_url) == 4

    with running_gateway(database_url, simulator, secret_key=key) as gateway:
        gateway.wait_status(message_id, "read", timeout=5)
        wait_for(lambda: window_open(gateway, other_customer), timeout=5, what="the other customer's message")
        # The poison is tried alone a few times, a second apart here, then buried.
        letter = buried(database_url, poison)
        assert letter["kind"] == "meta_webhook" and letter["attempts"] == webhook_jobs.WEBHOOK_ATTEMPTS
        assert letter["reference"] and letter["created_at"].endswith("Z")
        # Which constraint, not the values that broke it (a message's data stays out of errors).
        assert "upstream_message_id" in letter["error"]
        assert inbound_wamid not in letter["error"] and "parameters" not in letter["error"]
        assert stored_webhooks(database_url) == 0
        assert gateway.message(stranded)["upstream_message_id"] is None


def test_changes_of_other_fields_are_not_read_as_statuses(
    database_url: str, simulator: Simulator, manual_statuses: None
) -> None:
    with running_gateway(database_url, simulator) as gateway:
        message_id, wamid, to = sent_message(gateway)
        body = status_body(wamid, "delivered", to)
        # Another field's change, which parse_webhook skips: its content is no message status.
        template_update = {
            "field": "message_template_status_update",
            "value": {"event": "APPROVED", "message_template_id": 1, "statuses": [{"event": "APPROVED"}]},
        }
        body["entry"][0]["changes"].insert(0, template_update)
        post_signed(gateway.url, body)
        gateway.wait_status(message_id, "delivered")


def test_a_body_that_fails_on_receipt_is_stored_and_buried_and_holds_up_nothing(
    database_url: str, simulator: Simulator, manual_statuses: None, retries_a_second_apart: None
) -> None:
    """On SQLite the gateway applies a body as it receives it (whatsapp/receiver.py); one that fails
    there is stored instead, still answered 200, and goes the stored bodies' way: tried again, then
    buried. The bodies posted beside it are applied. (On PostgreSQL every body takes the stored way.)"""
    key = Fernet.generate_key().decode()
    with running_gateway(database_url, simulator, secret_key=key) as gateway:
        message_id, wamid, to, stranded, _, poison = sent_message_and_poison(gateway)
        post_signed(gateway.url, poison)  # asserts the 200
        post_signed(gateway.url, status_body(wamid, "read", to))
        gateway.wait_status(message_id, "read", timeout=5)
        letter = buried(database_url, poison)
        assert letter["kind"] == "meta_webhook" and letter["attempts"] == webhook_jobs.WEBHOOK_ATTEMPTS
        assert stored_webhooks(database_url) == 0
        assert gateway.message(stranded)["upstream_message_id"] is None
