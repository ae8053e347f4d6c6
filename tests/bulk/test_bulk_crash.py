"""Crash recovery of bulk sends: the gateway is SIGKILLed mid-batch, restarted, and every recipient gets
the message exactly once.

The real `wagate` command runs as a subprocess (migrate, provision, serve) on a real database, as in
tests/dispatch/test_crash_recovery.py, and sends to the session's in-thread simulator, whose signed status
webhooks come back to it. A batch is stored whole with the 202 (batch, messages and outbox rows in one
transaction), so whatever the kill interrupts, the restarted process must finish it: the batch says
`completed`, every accepted number reached the simulator once (none twice, none missing), and each
recipient's message is sent or delivered with the wamid the simulator gave it.

The batch goes on a channel of its own (its own phone number id at the simulator), paced slowly enough
that the batch takes several seconds, so a kill finds it half sent.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

import support.gateway_process as machinery
from support.gateway_process import (
    DONE,
    GRACE_SECONDS,
    GatewayProcess,
    Provisioned,
    diagnostics,
    max_in_window,
    outbox_sends,
    provision,
    register_channel,
    sim_sends,
)
from support.harness import ADMIN_TOKEN, Simulator, new_number, provision_file, wait_for

# Its statuses must come within a 2 s grace after a kill, which a loaded machine stretches: alone.
pytestmark = [pytest.mark.timeout(180), pytest.mark.alone]

RATE = 50  # the Bulk channel's messages per second
OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

# Fixtures, found by pytest as this module's attributes (`gateway_process` uses the `provisioned` below).
gateway_process = machinery.gateway_process
wired_simulator = machinery.wired_simulator


@pytest.fixture(scope="module")
def bulk_channel(database_url: str, simulator: Simulator) -> dict[str, Any]:
    """Acme's "Bulk" channel at RATE messages/s, with a phone number id of its own for this database."""
    return register_channel(simulator, "Bulk", RATE, ["admin@acme.test"])


@pytest.fixture(scope="module")
def provisioned(
    database_url: str,
    simulator: Simulator,
    bulk_channel: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Provisioned:
    spec = provision_file()
    spec["accounts"][0]["channels"].append(bulk_channel)
    return provision(database_url, simulator, tmp_path_factory.mktemp("bulk-crash"), spec)


@dataclass
class Batch:
    """A batch as the client knows it: the 202's id and the numbers it asked for."""

    batch_id: str
    numbers: list[str]
    phone_number_id: str

    def digits(self) -> set[str]:
        return {n.lstrip("+") for n in self.numbers}


def post_batch(
    gateway: GatewayProcess, provisioned: Provisioned, channel: dict[str, Any], size: int
) -> Batch:
    numbers = [new_number() for _ in range(size)]
    body = {"channel_id": provisioned.channels["Bulk"], "template": OTP, "phone_numbers": numbers}
    url = f"{gateway.url}/v1/accounts/{provisioned.account_id}/whatsapp/bulk_messages"
    response = httpx.post(url, json=body, headers=HEADERS, timeout=30)
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert {k: v for k, v in accepted.items() if k != "batch_id"} == {
        "status": "processing",
        "total": size,
        "accepted": size,
        "rejected": 0,
    }
    return Batch(accepted["batch_id"], numbers, channel["phone_number_id"])


def read_batch(http: httpx.Client, gateway: GatewayProcess, provisioned: Provisioned, batch: Batch) -> Any:
    url = f"{gateway.url}/v1/accounts/{provisioned.account_id}/whatsapp/bulk_messages/{batch.batch_id}"
    response = http.get(url, headers=HEADERS)
    assert response.status_code == 200, response.text
    return response.json()


def upstream(simulator: Simulator, batch: Batch) -> list[dict[str, Any]]:
    """The batch's sends the simulator accepted, oldest first."""
    wanted = batch.digits()
    return [e for e in sim_sends(simulator, batch.phone_number_id) if (e["to"] or "").lstrip("+") in wanted]


@dataclass
class KillReport:
    upstream_before_kill: int
    outbox_at_kill: Counter[str]
    restart_seconds: float = 0.0


def kill_and_restart(
    gateway: GatewayProcess, simulator: Simulator, provisioned: Provisioned, batch: Batch
) -> KillReport:
    gateway.kill()
    report = KillReport(len(upstream(simulator, batch)), outbox_sends(provisioned.database_url))
    gateway.start()
    report.restart_seconds = gateway.start_seconds
    return report


def check_batch_recovered(
    gateway: GatewayProcess,
    simulator: Simulator,
    provisioned: Provisioned,
    batch: Batch,
    report: KillReport,
    *,
    timeout: float = 60.0,
) -> None:
    """The batch completed, every number got its message exactly once, and each message says so."""
    wanted = batch.digits()
    with httpx.Client(timeout=10.0) as http:
        try:
            wait_for(
                lambda: read_batch(http, gateway, provisioned, batch)["status"] == "completed",
                timeout=timeout,
                interval=0.1,
                what="the batch to be completed",
            )
            wait_for(
                lambda: wanted <= {(e["to"] or "").lstrip("+") for e in upstream(simulator, batch)},
                timeout=timeout,
                interval=0.1,
                what="every number of the batch at the simulator",
            )
            # Quiescence, not a pause: once no send row is left in the outbox nothing more can go upstream.
            wait_for(
                lambda: not outbox_sends(provisioned.database_url),
                timeout=timeout,
                interval=0.1,
                what="the outbox to hold no send rows",
            )
        except AssertionError:
            seen = Counter((e["to"] or "").lstrip("+") for e in upstream(simulator, batch))
            view = read_batch(http, gateway, provisioned, batch)
            print(
                f"missing {len(wanted - set(seen))} of {len(wanted)}: {sorted(wanted - set(seen))[:10]}; "
                f"sent more than once {sum(c > 1 for c in seen.values())}; "
                f"batch {view['status']} {view['counts']}; {report}"
            )
            raise

        entries = upstream(simulator, batch)
        per_number = Counter((e["to"] or "").lstrip("+") for e in entries)
        doubled = {n: c for n, c in per_number.items() if c > 1}
        times = [e["received_monotonic"] for e in entries]
        print(
            f"batch of {len(wanted)}: at the kill {report.upstream_before_kill} had reached the simulator, "
            f"outbox send rows {dict(report.outbox_at_kill)}; restart took {report.restart_seconds:.1f} s; "
            f"simulator entries {len(entries)}, numbers sent more than once {len(doubled)}; "
            f"most sends in any 1 s window, across the restart: {max_in_window(times)} (rate {RATE})"
        )
        assert not doubled, f"{len(doubled)} numbers got more than one send: {list(doubled.items())[:10]}"
        assert set(per_number) == wanted

        view = read_batch(http, gateway, provisioned, batch)
        assert view["status"] == "completed" and view["completed_at"] is not None, view
        assert (view["total"], view["accepted"], view["rejected"]) == (len(wanted), len(wanted), 0)
        assert view["counts"]["pending"] == view["counts"]["failed"] == view["counts"]["rejected"] == 0
        by_number = {(e["to"] or "").lstrip("+"): e for e in entries}
        recipients = view["recipients"]
        assert [r["phone_number"] for r in recipients] == batch.numbers  # request order
        base = f"{gateway.url}/v1/accounts/{provisioned.account_id}/whatsapp/messages"
        deadline = time.monotonic() + timeout
        for recipient in recipients:
            entry = by_number[recipient["phone_number"].lstrip("+")]
            assert recipient["message_id"] is not None, recipient
            assert recipient["message_id"] == entry["biz_opaque_callback_data"], (recipient, entry)
            # The status webhooks are applied in the background: each message settles to a done status.
            while True:
                response = http.get(f"{base}/{recipient['message_id']}", headers=HEADERS)
                assert response.status_code == 200, response.text
                message = response.json()
                assert message["status"] != "failed", message
                if message["status"] in DONE and message["upstream_message_id"] == entry["wamid"]:
                    break
                assert time.monotonic() < deadline, f"message never settled: {message} ({entry['wamid']})"
                time.sleep(0.05)
    # Let the simulator finish its webhooks while the gateway still listens, so none is left over.
    simulator.http.get(f"{simulator.url}/_sim/idle", params={"seconds": 10}, timeout=15)


def test_killed_mid_batch(
    gateway_process: GatewayProcess,
    provisioned: Provisioned,
    bulk_channel: dict[str, Any],
    simulator: Simulator,
    wired_simulator: Callable[[str], None],
) -> None:
    """300 numbers at 50/s (6 s); SIGKILL once about a fifth went out, restart at once.

    The kill finds sends in every state: handed to Meta and recorded, handed to Meta with the answer
    lost (their status webhooks settle them after the restart), claimed ahead but never sent (sent by
    the new process once their lease ran out), and waiting.
    """
    gateway = gateway_process
    wired_simulator(gateway.url)
    # The premise of the grace period: Meta retries a webhook more often than the grace lasts.
    simulator.configure(webhook_retry_cap=GRACE_SECONDS / 2)
    gateway.start()
    try:
        batch = post_batch(gateway, provisioned, bulk_channel, 300)
        wait_for(
            lambda: len(upstream(simulator, batch)) >= 60,
            timeout=20,
            interval=0.02,
            what="60 of the batch at the simulator",
        )
        report = kill_and_restart(gateway, simulator, provisioned, batch)
        assert 60 <= report.upstream_before_kill < 300, report
        check_batch_recovered(gateway, simulator, provisioned, batch, report)
    except BaseException:
        print(f"{gateway.logs()}\nnow: {diagnostics(provisioned.database_url)}; gateway pid {gateway.pid()}")
        raise


def test_killed_right_after_the_202(
    gateway_process: GatewayProcess,
    provisioned: Provisioned,
    bulk_channel: dict[str, Any],
    simulator: Simulator,
    wired_simulator: Callable[[str], None],
) -> None:
    """SIGKILL the moment the 202 is read: the batch was stored whole, so the new process sends all of it.

    (The lane is woken by the same request, so a first slice of a few may have left before the kill.)
    """
    gateway = gateway_process
    wired_simulator(gateway.url)
    simulator.configure(webhook_retry_cap=GRACE_SECONDS / 2)
    gateway.start()
    try:
        batch = post_batch(gateway, provisioned, bulk_channel, 200)
        report = kill_and_restart(gateway, simulator, provisioned, batch)
        assert report.upstream_before_kill < 200, report
        check_batch_recovered(gateway, simulator, provisioned, batch, report)
    except BaseException:
        print(f"{gateway.logs()}\nnow: {diagnostics(provisioned.database_url)}; gateway pid {gateway.pid()}")
        raise


def test_killed_with_the_last_sends_unanswered(
    gateway_process: GatewayProcess,
    provisioned: Provisioned,
    bulk_channel: dict[str, Any],
    simulator: Simulator,
    wired_simulator: Callable[[str], None],
) -> None:
    """A small batch whose every send reached Meta but whose answers hang; SIGKILL before any status.

    After the restart nothing is left to send: Meta's status webhooks (retried until the gateway
    answers) settle every send, and that must complete the batch; sending any again would double it.
    """
    gateway = gateway_process
    wired_simulator(gateway.url)
    size = 5
    simulator.configure(
        fail_next={"count": size, "code": 408, "phone_number_id": bulk_channel["phone_number_id"]},
        slow_response_seconds=10.0,
        # Statuses come late, so that the kill lands before the gateway heard of the hung sends.
        status_delays={"sent": 2.0, "delivered": 2.5},
        webhook_retry_cap=GRACE_SECONDS / 2,
    )
    gateway.start()
    try:
        batch = post_batch(gateway, provisioned, bulk_channel, size)
        wait_for(
            lambda: len(upstream(simulator, batch)) == size,
            timeout=10,
            interval=0.01,
            what="the whole batch at the simulator",
        )
        report = kill_and_restart(gateway, simulator, provisioned, batch)
        assert report.outbox_at_kill == Counter({"in_flight": size}), report
        check_batch_recovered(gateway, simulator, provisioned, batch, report, timeout=30)
    except BaseException:
        print(f"{gateway.logs()}\nnow: {diagnostics(provisioned.database_url)}; gateway pid {gateway.pid()}")
        raise
