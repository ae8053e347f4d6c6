"""Shared test machinery: a real gateway and a real simulator on loopback sockets, and polling helpers."""

from __future__ import annotations

import itertools
import os
import random
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import orjson
import psycopg
from sqlalchemy.orm import Session

from wagate.accounts.models import Account
from wagate.channels.models import Channel
from wagate.core.config import Settings
from wagate.core.db import sqlite_path
from wagate.events.subscriptions import NO_SUBSCRIPTIONS
from wagate.messages.outbound import build_send
from wagate.messages.repository import store_sends
from wagate.whatsapp.signature import sign

T = TypeVar("T")

APP_SECRET = "test-app-secret"
VERIFY_TOKEN = "test-verify-token"
ADMIN_TOKEN = "wg_test_admin_token_acme_0001"
AGENT_TOKEN = "wg_test_agent_token_acme_0002"
OUTSIDER_TOKEN = "wg_test_outsider_token_acme_03"
REVOKED_TOKEN = "wg_test_revoked_token_acme_004"
OTHER_TOKEN = "wg_test_admin_token_globex_01"

MAIN = {
    "phone_number_id": "106540352242922",
    "waba_id": "102290129340398",
    "display_phone_number": "15550001111",
}
SECOND = {
    "phone_number_id": "106540352242923",
    "waba_id": "102290129340399",
    "display_phone_number": "15550002222",
}
GLOBEX = {
    "phone_number_id": "206540352242922",
    "waba_id": "202290129340398",
    "display_phone_number": "15550003333",
}


def provision_file() -> dict[str, Any]:
    def channel(name: str, ids: dict[str, str], members: list[str], mps: int = 80) -> dict[str, Any]:
        return {
            "name": name,
            "phone_number": "+" + ids["display_phone_number"],
            "phone_number_id": ids["phone_number_id"],
            "waba_id": ids["waba_id"],
            "access_token": f"EAAG-test-{name}",
            "members": members,
            "messages_per_second": mps,
        }

    return {
        "accounts": [
            {
                "name": "Acme",
                "users": [
                    {
                        "email": "admin@acme.test",
                        "name": "Acme Admin",
                        "role": "administrator",
                        "password": "pw-admin",
                    },
                    {
                        "email": "agent@acme.test",
                        "name": "Acme Agent",
                        "role": "agent",
                        "password": "pw-agent",
                    },
                    {
                        "email": "outsider@acme.test",
                        "name": "Outsider",
                        "role": "agent",
                        "password": "pw-out",
                    },
                ],
                "api_keys": [
                    {"user": "admin@acme.test", "name": "crm", "token": ADMIN_TOKEN},
                    {"user": "agent@acme.test", "name": "agent", "token": AGENT_TOKEN},
                    {"user": "outsider@acme.test", "name": "outsider", "token": OUTSIDER_TOKEN},
                    {"user": "admin@acme.test", "name": "old", "token": REVOKED_TOKEN, "revoked": True},
                ],
                "channels": [
                    channel("Main", MAIN, ["admin@acme.test", "agent@acme.test"]),
                    channel("Second", SECOND, ["admin@acme.test", "outsider@acme.test"]),
                ],
            },
            {
                "name": "Globex",
                "users": [
                    {
                        "email": "boss@globex.test",
                        "name": "Boss",
                        "role": "administrator",
                        "password": "pw-boss",
                    }
                ],
                "api_keys": [{"user": "boss@globex.test", "name": "erp", "token": OTHER_TOKEN}],
                "channels": [channel("Globex", GLOBEX, ["boss@globex.test"])],
            },
        ]
    }


_numbers = itertools.count(random.randint(0, 4_000_000))


def new_number() -> str:
    """A valid Azerbaijani mobile number no other test uses (the simulator's magic ones start +9945000).

    Drawn from +994555000000-+994558999999: the numbers tests write out (+994551234567 and its
    neighbours, +994552000000 and up for the too-many batch, +994559999999) lie outside it, so a long
    run that draws many numbers can never reach one of them."""
    return f"+99455{5_000_000 + next(_numbers) % 4_000_000:07d}"


def wait_for(
    check: Callable[[], T | None], *, timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> T:
    """Poll until `check` returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(interval)


@dataclass
class Simulator:
    url: str
    http: httpx.Client

    @property
    def graph_url(self) -> str:
        return f"{self.url}/v23.0"

    def messages(self, to: str | None = None) -> list[dict[str, Any]]:
        """What the simulator accepted (to one number, when given), oldest first."""
        params = {"to": to} if to is not None else {}
        items: list[dict[str, Any]] = self.http.get(f"{self.url}/_sim/messages", params=params).json()["data"]
        return items

    def configure(self, **changes: Any) -> None:
        self.http.post(f"{self.url}/_sim/config", json=changes).raise_for_status()

    def inbound(self, phone_number_id: str, sender: str, text: str, name: str | None = None) -> str:
        body = {"phone_number_id": phone_number_id, "from": sender, "text": text, "name": name}
        response = self.http.post(f"{self.url}/_sim/inbound", json=body)
        response.raise_for_status()
        wamid: str = response.json()["wamid"]
        return wamid


@dataclass
class Gateway:
    url: str
    http: httpx.Client
    sim: Simulator
    database_url: str
    ids: dict[str, int] = field(default_factory=dict)

    def headers(self, token: str = ADMIN_TOKEN, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}", **extra}

    def v1(self, path: str, account_id: int | None = None) -> str:
        return f"{self.url}/v1/accounts/{account_id or self.ids['acme']}{path}"

    def send(self, body: dict[str, Any], *, token: str = ADMIN_TOKEN, **headers: str) -> httpx.Response:
        payload = {"channel_id": self.ids["main"], **body}
        return self.http.post(
            self.v1("/whatsapp/messages"), json=payload, headers=self.headers(token, **headers)
        )

    def otp(self, number: str, code: str = "123456", **extra: Any) -> httpx.Response:
        template = {"name": "otp_code", "language": "en", "parameters": [code]}
        return self.send({"phone_number": number, "template": template, **extra})

    def message(self, message_id: str, *, token: str = ADMIN_TOKEN) -> dict[str, Any]:
        response = self.http.get(self.v1(f"/whatsapp/messages/{message_id}"), headers=self.headers(token))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def wait_status(self, message_id: str, status: str, timeout: float = 10.0) -> dict[str, Any]:
        return wait_for(
            lambda: (m := self.message(message_id))["status"] == status and m,
            timeout=timeout,
            what=f"message {message_id} to become {status}",
        )


def postgres_admin_url() -> str:
    return os.environ.get("WAGATE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


_CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


def post_login(client: httpx.Client, email: str, password: str) -> httpx.Response:
    """The dashboard's sign-in form, filled in and posted as a browser does (its CSRF token included)."""
    page = client.get("/login")
    assert page.status_code == 200 and "Sign in" in page.text
    token = _CSRF_FIELD.search(page.text)
    assert token is not None
    return client.post(
        "/login", data={"email": email, "password": password, "csrf_token": token.group(1), "next": "/"}
    )


@contextmanager
def signed_in(
    gateway: Gateway, email: str = "admin@acme.test", password: str = "pw-admin"
) -> Iterator[httpx.Client]:
    """An HTTP client signed in to the dashboard."""
    with httpx.Client(base_url=gateway.url) as client:
        assert post_login(client, email, password).status_code == 303
        yield client


# --- Meta's webhooks, signed as Meta signs them ---------------------------------------------------


@contextmanager
def held_template_sends(sim: Simulator) -> Iterator[None]:
    """The simulator holds every marketing and utility template send (template pacing) until it is
    released by hand; afterwards it holds none and lets every held send go."""
    sim.configure(hold_template_sends=True, held_release_seconds=None)
    try:
        yield
    finally:
        sim.configure(hold_template_sends=False, held_release_seconds=5.0)
        sim.http.post(f"{sim.url}/_sim/held/release", json={}).raise_for_status()


def sim_customer(gateway: Gateway, **body: Any) -> dict[str, Any]:
    """The simulator's customer on the main channel (made when new): {phone_number, wa_id, user_id,
    username}."""
    response = gateway.sim.http.post(
        f"{gateway.sim.url}/_sim/customers", json={"phone_number_id": MAIN["phone_number_id"], **body}
    )
    response.raise_for_status()
    found: dict[str, Any] = response.json()
    return found


def window(gateway: Gateway, number: str) -> dict[str, Any]:
    """Operation 3 for the number on the main channel."""
    query = {"channel_id": gateway.ids["main"], "phone_number": number}
    response = gateway.http.get(
        gateway.v1("/whatsapp/messages/window"), params=query, headers=gateway.headers()
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def post_meta(gateway: Gateway, body: dict[str, Any]) -> Any:
    raw = orjson.dumps(body)
    return gateway.http.post(
        f"{gateway.url}/webhooks/whatsapp",
        content=raw,
        headers={"X-Hub-Signature-256": sign(APP_SECRET, raw), "Content-Type": "application/json"},
    )


def change(value: dict[str, Any], field: str = "messages", number_id: str = MAIN["phone_number_id"]) -> Any:
    metadata = {"display_phone_number": MAIN["display_phone_number"], "phone_number_id": number_id}
    return {"field": field, "value": {"messaging_product": "whatsapp", "metadata": metadata, **value}}


def webhook(*changes: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "whatsapp_business_account",
        "entry": [{"id": MAIN["waba_id"], "changes": list(changes)}],
    }


def marketing_preference(gateway: Gateway, number: str, value: str, at: int) -> None:
    item = {
        "wa_id": number.lstrip("+"),
        "detail": "User requested to stop marketing messages",
        "category": "marketing_messages",
        "value": value,
        "timestamp": str(at),
    }
    body = webhook(
        change(
            {
                "contacts": [{"wa_id": number.lstrip("+"), "profile": {"name": "Ann"}}],
                "user_preferences": [item],
            },
            field="user_preferences",
        )
    )
    assert post_meta(gateway, body).status_code == 200


@contextmanager
def writes_held(database_url: str) -> Iterator[None]:
    """Another session holds what a send writes: the gateway's writer waits, and the sends that come
    meanwhile queue for its next batch (as under load)."""
    if database_url.startswith("sqlite"):
        path = sqlite_path(database_url)
        assert path is not None
        lock = sqlite3.connect(path, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        return
    with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://")) as held:
        held.execute("LOCK TABLE outbox IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            held.rollback()


def store_text_sends(session: Session, company: str, numbers: list[str]) -> list[str]:
    """A new account with one channel, and a text send to each number stored as the API stores it
    (message, conversation, outbox row): for tests that drive the write path without HTTP. Returns
    the message ids in order."""
    slug = re.sub(r"\W+", "-", company.lower())
    account = Account(name=company)
    session.add(account)
    session.flush()
    channel = Channel(
        account_id=account.id,
        name="Main",
        phone_number=f"+1555{random.randint(1_000_000, 9_999_999)}",
        phone_number_id=f"{slug}-1",
        waba_id=f"{slug}-waba",
        access_token_encrypted="x",
    )
    session.add(channel)
    session.flush()
    prepared = [
        build_send(
            account_id=account.id,
            channel_id=channel.id,
            phone_number=number,
            text="hello",
            bound=None,
            conversation_status=None,
            status_callback=None,
            settings=Settings(),
            subscriptions=NO_SUBSCRIPTIONS,
        )
        for number in numbers
    ]
    store_sends(session, prepared)
    return [send.message_id for send in prepared]
