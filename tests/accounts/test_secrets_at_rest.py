"""Secrets at rest (issue 14, point 6), on both databases: no channel token, webhook or callback secret,
API key or password is in any column of any table, whatever was done (provisioning, a webhook created,
sends with a status_callback secret, single and bulk, idempotent replays, deliveries); the encrypted
ones decrypt with the deployment's key; `wagate secrets rotate`, run while the gateway runs and sends,
re-encrypts every one of them under the new key, a second run changes nothing, and with the old key
removed the gateway still sends with its tokens and signs with the same secrets."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import MetaData, NullPool, create_engine, select
from standardwebhooks import Webhook

from support.app_in_thread import running_gateway, sql
from support.harness import (
    ADMIN_TOKEN,
    AGENT_TOKEN,
    MAIN,
    OTHER_TOKEN,
    OUTSIDER_TOKEN,
    REVOKED_TOKEN,
    Gateway,
    Simulator,
    new_number,
    provision_file,
    wait_for,
)
from support.receiver import Received, Receiver
from wagate.core.db import Database
from wagate.core.migrate import sync_url
from wagate.core.security import SecretBox
from wagate.ops.rotation import RotationReport, rotate_secrets

WAGATE = [sys.executable, "-m", "wagate.ops.cli"]
OLD_KEY = Fernet.generate_key().decode()
NEW_KEY = Fernet.generate_key().decode()
CHANNEL_TOKENS = ["EAAG-test-Main", "EAAG-test-Second", "EAAG-test-Globex"]
API_TOKENS = [ADMIN_TOKEN, AGENT_TOKEN, OUTSIDER_TOKEN, REVOKED_TOKEN, OTHER_TOKEN]
PASSWORDS = [u["password"] for a in provision_file()["accounts"] for u in a["users"]]
OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}


def stored_cells(database_url: str) -> Iterator[tuple[str, str, str]]:
    """Every non-empty cell of every table, as text: (table, column, value)."""
    engine = create_engine(sync_url(database_url), poolclass=NullPool)
    try:
        tables = MetaData()
        tables.reflect(engine)
        with engine.connect() as connection:
            for table in tables.sorted_tables:
                for row in connection.execute(select(table)).mappings():
                    for column, value in row.items():
                        if value is None:
                            continue
                        shown = value if isinstance(value, str) else json.dumps(value, default=str)
                        yield table.name, column, shown
    finally:
        engine.dispose()


def leaks(database_url: str, plain: list[str]) -> list[tuple[str, str, str]]:
    """The cells that hold any of `plain` (or, for a `whsec_` secret, its key material)."""
    needles = set(plain) | {p.removeprefix("whsec_") for p in plain if p.startswith("whsec_")}
    return [
        (table, column, needle)
        for table, column, value in stored_cells(database_url)
        for needle in needles
        if needle in value
    ]


def decrypts(token: str, key: str) -> str | None:
    try:
        return Fernet(key.encode()).decrypt(token.encode()).decode()
    except InvalidToken:
        return None


def encrypted_values(database_url: str) -> list[str]:
    """Every Fernet token the database keeps: channel tokens, webhook and callback secrets."""
    found = [row[0] for row in sql(database_url, "SELECT access_token_encrypted FROM channels")]
    found += [row[0] for row in sql(database_url, "SELECT secret_encrypted FROM webhooks")]
    found += [
        row[0]
        for row in sql(
            database_url, "SELECT secret_encrypted FROM deliveries WHERE secret_encrypted IS NOT NULL"
        )
    ]
    for (callback,) in sql(database_url, "SELECT status_callback FROM messages"):
        parsed = json.loads(callback) if isinstance(callback, str) else callback
        if isinstance(parsed, dict) and "secret_encrypted" in parsed:
            found.append(parsed["secret_encrypted"])
    return found


def create_webhook(gateway: Gateway, receiver: Receiver, path: str) -> dict[str, Any]:
    response = gateway.http.post(
        gateway.v1("/webhooks"),
        json={"url": receiver.url(path), "events": ["message_updated"]},
        headers=gateway.headers(),
    )
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    assert created["secret"].startswith("whsec_")
    return created


def otp_with_callback(
    gateway: Gateway, receiver: Receiver, path: str, secret: str, number: str | None = None, **headers: str
) -> Any:
    return gateway.send(
        {
            "phone_number": number or new_number(),
            "template": OTP,
            "status_callback": {"url": receiver.url(path), "secret": secret},
        },
        **headers,
    )


def verified(received: list[Received], secret: str | bytes) -> list[dict[str, Any]]:
    """The bodies, each signature checked with the Standard Webhooks library (raises when wrong)."""
    signer = Webhook(secret)
    return [signer.verify(r.body, r.headers) for r in received]


def about(received: list[Received], message_id: str) -> list[Received]:
    return [r for r in received if r.json.get("message", {}).get("id") == message_id]


def push_read(gateway: Gateway, message: dict[str, Any]) -> None:
    body = {
        "phone_number_id": MAIN["phone_number_id"],
        "wamid": message["upstream_message_id"],
        "status": "read",
    }
    gateway.sim.http.post(f"{gateway.sim.url}/_sim/statuses", json=body).raise_for_status()


@pytest.fixture
def only_the_real_tokens(simulator: Simulator) -> Iterator[None]:
    """The simulator takes only the provisioned channel tokens while the test runs: a send with a token
    decrypted wrong (or not at all) is refused."""
    simulator.configure(access_tokens=CHANNEL_TOKENS)
    try:
        yield
    finally:
        simulator.configure(access_tokens=None)


def rotate(database_url: str, key: str) -> tuple[int, dict[str, Any], str]:
    env = {
        **os.environ,
        "WAGATE_DATABASE_URL": database_url,
        "WAGATE_SECRET_KEY": key,
        "WAGATE_LOG_LEVEL": "warning",
    }
    done = subprocess.run(
        [*WAGATE, "secrets", "rotate", "--batch-size", "7"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report: dict[str, Any] = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, report, done.stderr


def test_no_token_or_secret_is_stored_in_clear(
    database_url: str, simulator: Simulator, receiver: Receiver, only_the_real_tokens: None
) -> None:
    callback_secret = "cb-" + secrets.token_urlsafe(16)
    bulk_secret = "cb-bulk-" + secrets.token_urlsafe(16)
    with running_gateway(database_url, simulator, secret_key=OLD_KEY, allow_private_urls=True) as gateway:
        webhook = create_webhook(gateway, receiver, "events-clear")
        number = new_number()
        first = otp_with_callback(
            gateway, receiver, "cb-clear", callback_secret, number, **{"Idempotency-Key": "k-1"}
        )
        assert first.status_code == 201, first.text
        again = otp_with_callback(
            gateway, receiver, "cb-clear", callback_secret, number, **{"Idempotency-Key": "k-1"}
        )
        assert again.json()["id"] == first.json()["id"]  # the replay: stored once, answered again
        batch = gateway.http.post(
            gateway.v1("/whatsapp/bulk_messages"),
            json={
                "channel_id": gateway.ids["main"],
                "template": OTP,
                "phone_numbers": [new_number(), new_number()],
                "status_callback": {"url": receiver.url("cb-bulk"), "secret": bulk_secret},
            },
            headers=gateway.headers(**{"Idempotency-Key": "k-bulk"}),
        )
        assert batch.status_code == 202, batch.text
        # Delivered and signed with the plain secrets, which the gateway read back from the database.
        message_id = first.json()["id"]
        verified(
            wait_for(lambda: about(receiver.received("cb-clear"), message_id), what="callback"),
            callback_secret.encode(),
        )
        verified(receiver.wait("cb-bulk", 2), bulk_secret.encode())
        verified(receiver.wait("events-clear", 1), webhook["secret"])

    plain = [*CHANNEL_TOKENS, *API_TOKENS, *PASSWORDS, webhook["secret"], callback_secret, bulk_secret]
    assert leaks(database_url, plain) == []
    # Really encrypted with the deployment's key (not merely left out): every one reads back.
    values = encrypted_values(database_url)
    readable = {decrypts(v, OLD_KEY) for v in values}
    assert set(CHANNEL_TOKENS) | {webhook["secret"], callback_secret, bulk_secret} <= readable
    assert None not in readable
    # API keys and passwords are hashes: SHA-256 of the token, argon2id of the password.
    hashes = sql(database_url, "SELECT token_hash FROM api_keys")
    assert hashes and all(len(h) == 64 and int(h, 16) >= 0 for (h,) in hashes)
    assert all(h.startswith("$argon2id$") for (h,) in sql(database_url, "SELECT password_hash FROM users"))


def test_rotation_reencrypts_everything_while_the_gateway_runs_and_the_old_key_can_go(
    database_url: str, simulator: Simulator, receiver: Receiver, only_the_real_tokens: None
) -> None:
    callback_secret = "cb-rot-" + secrets.token_urlsafe(16)
    with running_gateway(database_url, simulator, secret_key=OLD_KEY, allow_private_urls=True) as gateway:
        webhook = create_webhook(gateway, receiver, "events-rot")
        before = otp_with_callback(gateway, receiver, "cb-rot", callback_secret)
        assert before.status_code == 201, before.text
        message = gateway.wait_status(before.json()["id"], "delivered")

    # Step 1 (docs/operations.md): the new key first, the old one after it; the gateway restarted.
    both = f"{NEW_KEY},{OLD_KEY}"
    with running_gateway(database_url, simulator, secret_key=both, allow_private_urls=True) as gateway:
        # Step 2: rotate while the gateway runs and takes sends with callbacks.
        stop = threading.Event()
        sent: list[int] = []

        def keep_sending() -> None:
            while not stop.is_set():
                sent.append(otp_with_callback(gateway, receiver, "cb-during", callback_secret).status_code)

        sender = threading.Thread(target=keep_sending)
        sender.start()
        try:
            code, report, stderr = rotate(database_url, both)
        finally:
            stop.set()
            sender.join()
        assert code == 0, (report, stderr)
        assert sent and set(sent) == {201}
        assert report["keys"] == 2 and report["left_behind"] == 0
        tables = report["tables"]
        assert tables["channels"]["rotated"] == 3  # every channel of both accounts
        assert tables["webhooks"]["rotated"] >= 1 and tables["messages"]["rotated"] >= 1
        assert tables["deliveries"]["rotated"] >= 1
        # Every stored secret reads with the new key alone now.
        values = encrypted_values(database_url)
        assert values and all(decrypts(v, NEW_KEY) is not None for v in values)
        assert all(decrypts(v, OLD_KEY) is None for v in values)
        # Idempotent: a second run finds nothing to do. The gateway still runs, and the statuses of the
        # last sends may store new callback deliveries (written with the new key) during that run, so
        # the run sees at least the values stored before it and at most those stored after it.
        stored_before = len(encrypted_values(database_url))
        code, again, stderr = rotate(database_url, both)
        assert code == 0, stderr
        assert sum(t["rotated"] for t in again["tables"].values()) == 0
        seen = sum(t["already_current"] for t in again["tables"].values())
        assert stored_before <= seen <= len(encrypted_values(database_url))
        assert gateway.otp(new_number()).status_code == 201

    # The rotation is in each account's audit log, by the command, with counts and no secret.
    entries = sql(
        database_url,
        "SELECT account_id, actor_via, changes FROM audit_log WHERE action = 'secrets.rotated' ORDER BY id",
    )
    assert sorted(row[0] for row in entries) == sorted([gateway.ids["acme"], gateway.ids["globex"]])
    assert all(row[1] == "cli" for row in entries)
    acme = next(row[2] for row in entries if row[0] == gateway.ids["acme"])
    assert (json.loads(acme) if isinstance(acme, str) else acme)["channels"] == 2

    # Step 3: the old key removed. Sends still use the channel's token (the simulator takes only the
    # real ones), and events are signed with the same secrets as before.
    with running_gateway(database_url, simulator, secret_key=NEW_KEY, allow_private_urls=True) as gateway:
        after = gateway.otp(new_number())
        assert after.status_code == 201, after.text
        assert gateway.wait_status(after.json()["id"], "delivered")["status"] == "delivered"
        push_read(gateway, message)  # a status for the message sent before the rotation
        reports = wait_for(
            lambda: [
                r
                for r in about(receiver.received("cb-rot"), message["id"])
                if r.json["message"]["status"] == "read"
            ],
            what="the callback's report of the read",
        )
        assert verified(reports, callback_secret.encode())[0]["message"]["status"] == "read"
        events = wait_for(
            lambda: [
                r
                for r in about(receiver.received("events-rot"), message["id"])
                if r.json["message"]["status"] == "read"
            ],
            what="the webhook's event of the read",
        )
        verified(events, webhook["secret"])
        # And a new webhook's secret is kept under the new key.
        created = create_webhook(gateway, receiver, "events-new")
        (stored,) = sql(
            database_url, "SELECT secret_encrypted FROM webhooks WHERE id = :id", id=created["id"]
        )[0]
        assert decrypts(stored, NEW_KEY) == created["secret"]

    plain = [*CHANNEL_TOKENS, *API_TOKENS, webhook["secret"], callback_secret, created["secret"]]
    assert leaks(database_url, plain) == []


def test_a_key_that_is_no_fernet_key_is_refused_without_showing_it(database_url: str) -> None:
    code, report, stderr = rotate(database_url, f"{NEW_KEY},not-a-key-but-a-secret")
    assert code == 2 and report == {}
    assert "key 2 of 2" in stderr and "not-a-key-but-a-secret" not in stderr and NEW_KEY not in stderr


def test_new_key_prints_a_fernet_key() -> None:
    done = subprocess.run(
        [*WAGATE, "secrets", "new-key"], capture_output=True, text=True, timeout=60, check=True
    )
    key = done.stdout.strip()
    assert decrypts(Fernet(key.encode()).encrypt(b"x").decode(), key) == "x"


def test_a_row_changed_during_the_rotation_is_not_overwritten(database_url: str) -> None:
    """Provisioning gives a channel a new token between the rotation's read of the row and its write:
    the new token stays (the write compares what it read), and the next pass sees it current."""
    newest = Fernet.generate_key().decode()
    box = SecretBox(f"{newest},{NEW_KEY},{OLD_KEY}")
    (channel_id,) = sql(database_url, "SELECT min(id) FROM channels")[0]
    replaced = Fernet(newest.encode()).encrypt(b"EAAG-replaced-meanwhile").decode()

    async def run() -> RotationReport:
        db = Database(database_url, pool_size=2)
        real_write = db.write
        interfered = False

        async def write(unit: Any, **options: Any) -> Any:
            nonlocal interfered
            if not interfered:  # the first batch: channels, read before this change
                interfered = True
                sql(
                    database_url,
                    "UPDATE channels SET access_token_encrypted = :token WHERE id = :id",
                    token=replaced,
                    id=channel_id,
                )
            return await real_write(unit, **options)

        db.write = write  # type: ignore[method-assign]
        try:
            return await rotate_secrets(db, box, batch_size=100)
        finally:
            await db.dispose()

    report = asyncio.run(run())
    channels = report.columns["channels"]
    assert (channels.rotated, channels.changed, channels.unreadable) == (2, 0, 0)
    assert report.left_behind == 0
    stored = dict(sql(database_url, "SELECT id, access_token_encrypted FROM channels"))
    assert decrypts(stored[channel_id], newest) == "EAAG-replaced-meanwhile"
    assert all(decrypts(token, newest) is not None for token in stored.values())


def test_the_key_file_default_takes_several_keys_the_first_encrypting(tmp_path: Path) -> None:
    """Without WAGATE_SECRET_KEY the key file beside the database is used: made once with one key, and
    during a rotation it holds the new key first and the old one after it (a line or a comma each)."""
    key_file = tmp_path / "wagate.secret"
    made = SecretBox.from_settings("", key_file)
    assert key_file.stat().st_mode & 0o777 == 0o600
    old_token = made.encrypt("EAAG-old")
    newer = Fernet.generate_key().decode()
    key_file.write_text(f"{newer}\n{key_file.read_text().strip()}\n")
    box = SecretBox.from_settings("", key_file)
    assert box.key_count == 2 and box.decrypt(old_token) == "EAAG-old" and not box.is_current(old_token)
    assert decrypts(box.encrypt("EAAG-new"), newer) == "EAAG-new"
    assert decrypts(box.rotate(old_token), newer) == "EAAG-old"
