"""SIGTERM drains (issue 15, point 4): `wagate serve` stops taking requests, finishes the upstream calls
under way and records them, gives back what it had claimed, and exits 0; started again, it sends the
rest at once, each message exactly once, without waiting for any lease to run out.

The real `wagate serve` runs as a subprocess against the session's simulator, which answers every send
only after 0.3 s (Meta's usual latency), so that calls are under way when the signal comes.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from test_crash_recovery import SendLog, send_many, sim_entries

import support.gateway_process as machinery
from support.gateway_process import GatewayProcess, Provisioned, diagnostics, free_port, outbox_sends, query
from support.harness import ADMIN_TOKEN, Simulator, new_number, wait_for
from support.receiver import Receiver

pytestmark = pytest.mark.timeout(120)

provisioned = machinery.provisioned
gateway_process = machinery.gateway_process
wired_simulator = machinery.wired_simulator


def test_sigterm_finishes_calls_under_way_releases_claims_and_exits_0(
    gateway_process: GatewayProcess,
    provisioned: Provisioned,
    simulator: Simulator,
    wired_simulator: Callable[[str], None],
) -> None:
    gateway = gateway_process
    wired_simulator(gateway.url)
    simulator.configure(response_latency_seconds=0.3)
    gateway.start()
    log = SendLog()
    try:
        # 300 sends on an 80/s channel: about 4 s of backlog, with calls under way at every moment.
        send_many(gateway.url, provisioned, log, total=300, rate=None, concurrency=8)
        assert log.accepted_count() == 300, (log.connection_errors, log.other[:3])
        wait_for(lambda: len(sim_entries(simulator, log.attempted)) >= 40, timeout=20, what="40 sends")
        assert gateway.proc is not None
        stopping = time.monotonic()
        gateway.proc.send_signal(signal.SIGTERM)
        code = gateway.proc.wait(timeout=60)
        took = time.monotonic() - stopping
        assert code == 0, (code, gateway.logs())

        sent_before = Counter(e["biz_opaque_callback_data"] for e in sim_entries(simulator, log.attempted))
        assert max(sent_before.values()) == 1, sent_before.most_common(3)
        # Nothing left claimed: every send row is back to ready (or done and gone), none in flight and
        # none held by a lease of the stopped process.
        rows = outbox_sends(provisioned.database_url)
        assert rows["in_flight"] == 0 and rows["unconfirmed"] == 0, rows
        held = query(
            provisioned.database_url,
            "SELECT count(*) FROM outbox WHERE kind = 'send_message' AND locked_by IS NOT NULL",
        )
        assert held[0][0] == 0, held
        # Every call the process had made was recorded before it exited: a message Meta has, we have
        # its wamid.
        at_meta = set(sent_before)
        unknown = "SELECT id FROM messages WHERE upstream_message_id IS NULL"
        unrecorded = sorted(at_meta & {row[0] for row in query(provisioned.database_url, unknown)})
        assert unrecorded == [], unrecorded
        print(f"SIGTERM: exited 0 after {took:.1f} s; {len(at_meta)} sent before, {dict(rows)} left")

        restarted = time.monotonic()
        gateway.start()
        wait_for(
            lambda: len(sim_entries(simulator, log.attempted)) >= 300,
            timeout=30,
            what="every accepted message at the simulator",
        )
        # Given back, not stranded: the rest went at once, not after a lease (60 s) ran out.
        assert time.monotonic() - restarted < 20
        sent = Counter(e["biz_opaque_callback_data"] for e in sim_entries(simulator, log.attempted))
        assert set(sent) == set(log.accepted) and max(sent.values()) == 1, sent.most_common(3)
    except BaseException:
        print(f"{gateway.logs()}\nnow: {diagnostics(provisioned.database_url)}")
        raise


def test_sigterm_finishes_event_deliveries_under_way_and_gives_back_the_rest(
    provisioned: Provisioned,
    simulator: Simulator,
    wired_simulator: Callable[[str], None],
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    """Deliveries under way when SIGTERM comes are posted to the end and recorded, and no claim is left
    behind (a claim without a call is given back rather than left to its lease, 300 s here, far beyond
    the test): a restarted process posts the rest at once, and no event reaches the receiver twice."""
    env = {**provisioned.env, "WAGATE_ALLOW_PRIVATE_URLS": "true", "WAGATE_EVENT_LEASE_SECONDS": "300"}
    gateway = GatewayProcess(env, free_port(), tmp_path, name="events")
    gateway.start()
    wired_simulator(gateway.url)
    path = f"drain-{time.monotonic_ns()}"
    receiver.slow_down(path, 1.5)  # every call is under way for 1.5 s
    database = provisioned.database_url
    try:
        with httpx.Client(timeout=10) as http:
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            base = f"{gateway.url}/v1/accounts/{provisioned.account_id}"
            hook = http.post(f"{base}/webhooks", json={"url": receiver.url(path)}, headers=headers)
            assert hook.status_code == 201, hook.text
            webhook_id = hook.json()["id"]
            template = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
            for _ in range(40):
                body = {
                    "channel_id": provisioned.channel_id,
                    "phone_number": new_number(),
                    "template": template,
                }
                assert http.post(f"{base}/whatsapp/messages", json=body, headers=headers).status_code == 201
        of_hook = f"SELECT count(*) FROM deliveries WHERE webhook_id = {int(webhook_id)}"  # noqa: S608
        pending = f"{of_hook} AND state = 'pending'"
        wait_for(lambda: query(database, pending)[0][0] >= 20, timeout=20, what="20 deliveries pending")
        wait_for(lambda: len(receiver.received(path)) >= 3, timeout=20, what="the first deliveries")
        assert gateway.proc is not None
        at_signal = len(receiver.received(path))
        gateway.proc.send_signal(signal.SIGTERM)
        assert gateway.proc.wait(timeout=30) == 0, gateway.logs()
        claimed = query(
            database, "SELECT count(*) FROM outbox WHERE kind = 'deliver_event' AND locked_by IS NOT NULL"
        )
        assert claimed[0][0] == 0, claimed
        drained = len(receiver.received(path)) - at_signal  # posted to the end after the signal
        assert drained > 0
        total = query(database, of_hook)[0][0]

        gateway.start()
        wait_for(lambda: query(database, pending)[0][0] == 0, timeout=60, what="every delivery posted")
        ids = Counter(r.headers["webhook-id"] for r in receiver.received(path))
        assert len(ids) == total and max(ids.values()) == 1, ids.most_common(3)
        print(
            f"SIGTERM with event deliveries: {at_signal} of {total} answered before it, {drained} under way"
        )
    except BaseException:
        print(f"{gateway.logs()}\nnow: {diagnostics(database)}")
        raise
    finally:
        gateway.stop()
