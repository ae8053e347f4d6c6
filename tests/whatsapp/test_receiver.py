"""API.md section 9: Meta's webhooks at /webhooks/whatsapp, signed, stored, applied forward only."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import psycopg
import pytest

from support.app_in_thread import sql
from support.harness import APP_SECRET, MAIN, VERIFY_TOKEN, Gateway, new_number, wait_for, writes_held
from wagate.whatsapp.receiver import HANDED_OVER_SECONDS
from wagate.whatsapp.signature import sign


def post_signed(gateway: Gateway, body: Any, secret: str = APP_SECRET) -> Any:
    raw = orjson.dumps(body) if not isinstance(body, bytes) else body
    return gateway.http.post(
        f"{gateway.url}/webhooks/whatsapp",
        content=raw,
        headers={"X-Hub-Signature-256": sign(secret, raw), "Content-Type": "application/json"},
    )


def status_webhook(*statuses: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": MAIN["waba_id"],
                "changes": [
                    {
                        "field": "messages",
                        "value": {
                            "messaging_product": "whatsapp",
                            "metadata": {
                                "display_phone_number": "15550001111",
                                "phone_number_id": MAIN["phone_number_id"],
                            },
                            "statuses": list(statuses),
                        },
                    }
                ],
            }
        ],
    }


def status(wamid: str, kind: str, at: int, recipient: str, **extra: Any) -> dict[str, Any]:
    return {"id": wamid, "status": kind, "timestamp": str(at), "recipient_id": recipient, **extra}


def test_verification_handshake(gateway: Gateway) -> None:
    params = {"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": "1158201444"}
    response = gateway.http.get(f"{gateway.url}/webhooks/whatsapp", params=params)
    assert response.status_code == 200 and response.text == "1158201444"
    assert response.headers["content-type"].startswith("text/plain")
    wrong = gateway.http.get(
        f"{gateway.url}/webhooks/whatsapp", params={**params, "hub.verify_token": "nope"}
    )
    assert wrong.status_code == 403


def test_signatures_are_required(gateway: Gateway) -> None:
    raw = orjson.dumps(status_webhook())
    unsigned = gateway.http.post(f"{gateway.url}/webhooks/whatsapp", content=raw)
    assert unsigned.status_code == 401 and unsigned.json()["error"]["code"] == "unauthorized"
    assert post_signed(gateway, raw, secret="another-secret").status_code == 401
    assert post_signed(gateway, raw).status_code == 200


def test_only_bodies_that_are_no_webhook_at_all_are_400(gateway: Gateway) -> None:
    assert post_signed(gateway, b"{not json").status_code == 400
    assert post_signed(gateway, [1, 2]).status_code == 400
    assert post_signed(gateway, {"object": "whatsapp_business_account"}).status_code == 400
    refused = post_signed(gateway, {"object": "whatsapp_business_account", "entry": "x"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
    # An item Meta's webhook may hold but the gateway cannot apply is kept for an operator, not
    # refused: a 400 would make Meta retry the whole body for days (test_meta_formats.py).
    assert post_signed(gateway, status_webhook({"status": "delivered"})).status_code == 200


def sent_message(gateway: Gateway) -> tuple[str, str, str]:
    """An OTP that Meta accepted (statuses off, so the test drives them): (message id, wamid, digits)."""
    number = new_number()
    message_id = gateway.otp(number).json()["id"]
    message = wait_for(lambda: (m := gateway.message(message_id))["upstream_message_id"] and m, what="wamid")
    return message_id, message["upstream_message_id"], number.removeprefix("+")


def test_statuses_posted_together_are_each_stored_and_applied(gateway: Gateway) -> None:
    """Bodies that come in together are stored in one statement (wagate.core.units.Mergeable): each is
    acknowledged, and each is applied."""
    gateway.sim.configure(auto_statuses=False)
    try:
        # One status a message, so that each body's effect shows whatever order the POSTs arrive
        # in: a message's `read` stored before its `delivered` would rightly drop the `delivered`.
        sent = [(*sent_message(gateway), kind) for kind in ("delivered", "read") for _ in range(6)]
        now = int(time.time())
        bodies = [status_webhook(status(wamid, kind, now + 1, to)) for _, wamid, to, kind in sent]
        with ThreadPoolExecutor(len(bodies)) as pool:
            with writes_held(gateway.database_url):
                answers = [pool.submit(post_signed, gateway, body) for body in bodies]
                time.sleep(1.0)  # one store waits on the lock, the others queue behind it
            assert [answer.result().status_code for answer in answers] == [200] * len(bodies)
        for message_id, _, _, kind in sent:
            message = gateway.wait_status(message_id, kind)
            assert [h["status"] for h in message["status_history"]] == ["sent", kind]
    finally:
        gateway.sim.configure(auto_statuses=True)


def test_on_sqlite_a_status_is_applied_before_its_200(gateway: Gateway) -> None:
    """SQLite: the one process sends for every channel and applies a status body in the unit of work
    its 200 waits for, never storing it (docs/decisions/0003-status-webhooks.md): read from the database
    the moment the 200 is in, the message has moved. (Stored, it would wait for the dispatcher's claim
    and apply, two more commits.) PostgreSQL stores it and applies it soon (the test below)."""
    gateway.sim.configure(auto_statuses=False)
    try:
        for message_id, wamid, to in [sent_message(gateway) for _ in range(5)]:
            delivered = status_webhook(status(wamid, "delivered", int(time.time()), to))
            assert post_signed(gateway, delivered).status_code == 200
            if gateway.database_url.startswith("sqlite"):
                row = sql(gateway.database_url, "SELECT status FROM messages WHERE id = :id", id=message_id)
                assert row == [("delivered",)]
            else:
                gateway.wait_status(message_id, "delivered")
        assert sql(gateway.database_url, "SELECT count(*) FROM outbox WHERE kind = 'meta_webhook'") == [(0,)]
    finally:
        gateway.sim.configure(auto_statuses=True)


def test_on_postgresql_the_process_that_stored_a_status_applies_it_without_a_claim(gateway: Gateway) -> None:
    """PostgreSQL: the body is stored before the 200, due for a claim only `HANDED_OVER_SECONDS` later,
    and the process that stored it, which sends for its channel, applies it from what it received,
    deleting the row in the same transaction (docs/decisions/0003-status-webhooks.md). While that
    transaction waits (another session holds the messages), the row reads as stored: never claimed,
    due seconds ahead. Then the message moves and no row is left."""
    if gateway.database_url.startswith("sqlite"):
        pytest.skip("SQLite applies a status before its 200 (the test above)")
    gateway.sim.configure(auto_statuses=False)
    try:
        message_id, wamid, to = sent_message(gateway)
        delivered = status_webhook(status(wamid, "delivered", int(time.time()), to))
        url = gateway.database_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(url) as held:
            held.execute("LOCK TABLE messages IN EXCLUSIVE MODE")  # reads go on, the status waits
            assert post_signed(gateway, delivered).status_code == 200
            time.sleep(1.0)  # past the dispatcher's next tick
            rows = sql(
                gateway.database_url,
                "SELECT attempts, locked_by, run_at - created_at FROM outbox WHERE kind = 'meta_webhook'",
            )
            held.rollback()
        assert len(rows) == 1, rows
        attempts, locked_by, due_after = rows[0]
        assert (attempts, locked_by) == (0, None)
        assert due_after.total_seconds() == pytest.approx(HANDED_OVER_SECONDS, abs=0.5)
        gateway.wait_status(message_id, "delivered", timeout=HANDED_OVER_SECONDS / 2)
        assert sql(gateway.database_url, "SELECT count(*) FROM outbox WHERE kind = 'meta_webhook'") == [(0,)]
    finally:
        gateway.sim.configure(auto_statuses=True)


def test_statuses_move_forward_only_and_once(gateway: Gateway) -> None:
    gateway.sim.configure(auto_statuses=False)
    try:
        message_id, wamid, to = sent_message(gateway)
        now = int(time.time())
        # Out of order and duplicated, as Meta may deliver them: `read` lands first...
        assert post_signed(gateway, status_webhook(status(wamid, "read", now + 2, to))).status_code == 200
        gateway.wait_status(message_id, "read")
        # ...then the late `delivered` and a repeat of `read` change nothing.
        late = status_webhook(status(wamid, "delivered", now + 1, to))
        assert post_signed(gateway, late).status_code == 200
        assert post_signed(gateway, status_webhook(status(wamid, "read", now + 2, to))).status_code == 200
        time.sleep(0.3)  # give them their chance to (wrongly) land
        message = gateway.message(message_id)
        assert message["status"] == "read"
        assert [h["status"] for h in message["status_history"]] == ["sent", "read"]
        # A failure after read is ignored.
        failed = status(
            wamid, "failed", now + 3, to, errors=[{"code": 131026, "title": "Message undeliverable"}]
        )
        post_signed(gateway, status_webhook(failed))
        time.sleep(0.3)
        assert gateway.message(message_id)["status"] == "read"
    finally:
        gateway.sim.configure(auto_statuses=True)


def test_failed_is_final_and_carries_the_error(gateway: Gateway) -> None:
    gateway.sim.configure(auto_statuses=False)
    try:
        message_id, wamid, to = sent_message(gateway)
        now = int(time.time())
        failed = status(
            wamid,
            "failed",
            now,
            to,
            errors=[{"code": 131047, "title": "Re-engagement message", "message": "x"}],
        )
        post_signed(gateway, status_webhook(failed, status(wamid, "delivered", now + 1, to)))
        message = gateway.wait_status(message_id, "failed")
        time.sleep(0.3)
        message = gateway.message(message_id)
        assert message["status"] == "failed"
        assert message["external_error"] == "131047: Re-engagement message"
        assert [h["status"] for h in message["status_history"]] == ["sent", "failed"]
    finally:
        gateway.sim.configure(auto_statuses=True)


def test_simulators_duplicated_and_reordered_statuses_end_in_order(gateway: Gateway) -> None:
    gateway.sim.configure(duplicate_statuses=True, reorder_statuses=True, read_enabled=True)
    try:
        number = new_number()
        message_id = gateway.otp(number).json()["id"]
        message = gateway.wait_status(message_id, "read")
        history = [h["status"] for h in message["status_history"]]
        assert history[0] == "sent" and history[-1] == "read" and len(history) == len(set(history))
    finally:
        gateway.sim.configure(duplicate_statuses=False, reorder_statuses=False, read_enabled=False)


def test_a_status_for_an_unknown_wamid_is_parked_until_the_message_is_known(gateway: Gateway) -> None:
    from wagate.simulator.magic import MAGIC_SLOW

    # The Cloud API's reply is lost (slower than our timeout), so we never learn the wamid from it.
    gateway.sim.configure(auto_statuses=False, slow_response_seconds=3)
    try:
        message_id = gateway.otp(MAGIC_SLOW).json()["id"]

        def ours() -> list[dict[str, Any]]:
            return [
                m for m in gateway.sim.messages(to=MAGIC_SLOW) if m["biz_opaque_callback_data"] == message_id
            ]

        [request] = wait_for(ours, what="the upstream request")
        wamid, to, now = request["wamid"], request["to"], int(time.time())
        # `delivered` arrives first and without our id: nothing to tie it to yet.
        post_signed(gateway, status_webhook(status(wamid, "delivered", now + 1, to)))
        time.sleep(0.3)
        assert gateway.message(message_id)["upstream_message_id"] is None
        # `sent` carries our id (biz_opaque_callback_data): it settles the send and the parked status applies.
        post_signed(
            gateway, status_webhook(status(wamid, "sent", now, to, biz_opaque_callback_data=message_id))
        )
        message = gateway.wait_status(message_id, "delivered")
        assert message["upstream_message_id"] == wamid
        time.sleep(3.5)  # past the grace period: a settled send is never sent again
        assert len(ours()) == 1
    finally:
        gateway.sim.configure(auto_statuses=True, slow_response_seconds=30)
