"""Crash recovery: the gateway is SIGKILLed mid-run, restarted, and nothing it accepted is lost or doubled.

The real `wagate` command runs as a subprocess (migrate, provision, serve) on a real database, talking
over loopback sockets to the session's in-thread Cloud API simulator, which sends its signed status
webhooks back to it. A client posts OTP sends; the gateway process is killed with SIGKILL while sends
are being accepted and dispatched; after a restart (same environment, same port) every message that got
a 201 must have reached the simulator exactly once, and its status must say so.

A request that died with a connection error was not accepted: it may or may not have been stored, so
it is only held to "at most once". Every send goes to a number of its own, so the simulator's log tells
which request each upstream call belongs to.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
    outbox_sends,
)
from support.harness import ADMIN_TOKEN, MAIN, Simulator, new_number, wait_for

# Its statuses must come within a 2 s grace after a kill, which a loaded machine stretches: alone.
pytestmark = [pytest.mark.timeout(180), pytest.mark.alone]

# Fixtures, found by pytest as this module's attributes.
provisioned = machinery.provisioned
gateway_process = machinery.gateway_process
wired_simulator = machinery.wired_simulator


@dataclass
class SendLog:
    """What the client saw: ids that got a 201 (with their number), and every number it tried."""

    accepted: dict[str, str] = field(default_factory=dict)
    attempted: set[str] = field(default_factory=set)
    connection_errors: int = 0
    other: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def accepted_count(self) -> int:
        with self.lock:
            return len(self.accepted)


def send_many(
    url: str,
    provisioned: Provisioned,
    log: SendLog,
    *,
    total: int,
    rate: float | None,
    concurrency: int,
    stop: threading.Event | None = None,
) -> None:
    """POST up to `total` OTP sends, each to its own number, `rate` per second (None: as fast as possible).

    Connection errors (the gateway is down) do not stop it: it goes on until `total` or `stop`.
    """
    endpoint = f"{url}/v1/accounts/{provisioned.account_id}/whatsapp/messages"
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    counter = itertools.count()
    counter_lock = threading.Lock()
    started = time.monotonic()

    def worker() -> None:
        with httpx.Client(timeout=10.0) as http:
            while stop is None or not stop.is_set():
                with counter_lock:
                    n = next(counter)
                if n >= total:
                    return
                if rate is not None:
                    # Pacing the load, not waiting for an outcome.
                    due = started + n / rate
                    if (pause := due - time.monotonic()) > 0:
                        time.sleep(pause)
                number = new_number()
                body = {
                    "channel_id": provisioned.channel_id,
                    "phone_number": number,
                    "template": {"name": "otp_code", "language": "en", "parameters": [f"{n:06d}"]},
                }
                with log.lock:
                    log.attempted.add(number)
                try:
                    response = http.post(endpoint, json=body, headers=headers)
                except httpx.TransportError:
                    with log.lock:
                        log.connection_errors += 1
                    continue
                with log.lock:
                    if response.status_code == 201:
                        log.accepted[response.json()["id"]] = number
                    else:
                        log.other.append(f"{response.status_code} {response.text[:200]}")

    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(concurrency)]:
            future.result()


def send_burst(url: str, provisioned: Provisioned, log: SendLog, *, total: int) -> None:
    """Accept `total` OTP sends at once, as one bulk batch, each to a number of its own.

    One request stores the whole backlog in one commit, so how much of it is still waiting at a given
    moment depends on the channel's pace only, not on how fast the client got its answers.
    """
    numbers = [new_number() for _ in range(total)]
    with log.lock:
        log.attempted.update(numbers)
    base = f"{url}/v1/accounts/{provisioned.account_id}/whatsapp/bulk_messages"
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    body = {
        "channel_id": provisioned.channel_id,
        "template": {"name": "otp_code", "language": "en", "parameters": ["123456"]},
        "phone_numbers": numbers,
    }
    with httpx.Client(timeout=30.0) as http:
        response = http.post(base, json=body, headers=headers)
        assert response.status_code == 202, response.text
        batch = http.get(f"{base}/{response.json()['batch_id']}", headers=headers)
        assert batch.status_code == 200, batch.text
    with log.lock:
        for recipient in batch.json()["recipients"]:
            if recipient["message_id"] is None:
                log.other.append(f"not accepted: {recipient}")
            else:
                log.accepted[recipient["message_id"]] = recipient["phone_number"]


def sim_entries(simulator: Simulator, numbers: set[str]) -> list[dict[str, Any]]:
    """The simulator's accepted sends on the Main number to any of `numbers`."""
    digits = {n.lstrip("+") for n in numbers}
    response = simulator.http.get(
        f"{simulator.url}/_sim/messages", params={"phone_number_id": MAIN["phone_number_id"]}
    )
    response.raise_for_status()
    return [e for e in response.json()["data"] if (e["to"] or "").lstrip("+") in digits]


@dataclass
class KillReport:
    accepted_before_kill: int = 0
    upstream_before_kill: int = 0
    outbox_at_kill: Counter[str] = field(default_factory=Counter)
    restart_seconds: float = 0.0


def check_recovery(
    gateway: GatewayProcess,
    simulator: Simulator,
    provisioned: Provisioned,
    log: SendLog,
    report: KillReport,
    *,
    timeout: float = 30.0,
) -> None:
    """Every accepted message reached the simulator exactly once, and its status says so; none doubled."""
    assert not log.other, f"unexpected answers: {log.other[:5]}"
    accepted = dict(log.accepted)
    wanted = set(accepted)

    def all_arrived() -> list[dict[str, Any]] | None:
        entries = sim_entries(simulator, log.attempted)
        seen = {e["biz_opaque_callback_data"] for e in entries}
        return entries if wanted <= seen else None

    try:
        wait_for(all_arrived, timeout=timeout, interval=0.1, what="every accepted message at the simulator")
        # Quiescence, not a pause: once no send row is left in the outbox nothing more can go upstream.
        wait_for(
            lambda: not outbox_sends(provisioned.database_url),
            timeout=timeout,
            interval=0.1,
            what="the outbox to hold no send rows",
        )
    except AssertionError:
        entries = sim_entries(simulator, log.attempted)
        seen = {e["biz_opaque_callback_data"] for e in entries}
        missing = sorted(wanted - seen)
        print(f"missing {len(missing)} of {len(wanted)}: {missing[:10]}")
        raise

    entries = sim_entries(simulator, log.attempted)
    per_number = Counter((e["to"] or "").lstrip("+") for e in entries)
    doubled = {n: c for n, c in per_number.items() if c > 1}
    by_id: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_id.setdefault(entry["biz_opaque_callback_data"], []).append(entry)
    print(
        f"accepted {len(accepted)} (before the kill {report.accepted_before_kill}), "
        f"connection errors {log.connection_errors}; at the kill: upstream already "
        f"{report.upstream_before_kill}, outbox send rows {dict(report.outbox_at_kill)}; "
        f"restart took {report.restart_seconds:.1f} s; "
        f"simulator entries {len(entries)}, numbers sent more than once {len(doubled)}"
    )
    assert not doubled, f"{len(doubled)} numbers got more than one send: {list(doubled.items())[:10]}"
    for message_id, number in accepted.items():
        (entry,) = by_id[message_id]
        assert (entry["to"] or "").lstrip("+") == number.lstrip("+")

    # The status webhooks are applied in the background: each message settles to a done status.
    with httpx.Client(timeout=10.0) as http:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        base = f"{gateway.url}/v1/accounts/{provisioned.account_id}/whatsapp/messages"
        deadline = time.monotonic() + timeout
        for message_id in accepted:
            wamid = by_id[message_id][0]["wamid"]
            while True:
                response = http.get(f"{base}/{message_id}", headers=headers)
                assert response.status_code == 200, response.text
                message = response.json()
                assert message["status"] != "failed", message
                if message["status"] in DONE and message["upstream_message_id"] == wamid:
                    break
                assert time.monotonic() < deadline, f"message never settled: {message} (wamid {wamid})"
                time.sleep(0.05)
    # Let the simulator finish its webhooks while the gateway still listens, so none is left over.
    simulator.http.get(f"{simulator.url}/_sim/idle", params={"seconds": 10}, timeout=15)


def snapshot_at_kill(simulator: Simulator, provisioned: Provisioned, log: SendLog) -> KillReport:
    with log.lock:
        accepted = set(log.accepted)
        attempted = set(log.attempted)
    upstream = {e["biz_opaque_callback_data"] for e in sim_entries(simulator, attempted)}
    return KillReport(
        accepted_before_kill=len(accepted),
        upstream_before_kill=len(accepted & upstream),
        outbox_at_kill=outbox_sends(provisioned.database_url),
    )


def test_killed_while_accepting_and_sending(
    gateway_process: GatewayProcess,
    provisioned: Provisioned,
    simulator: Simulator,
    wired_simulator: Callable[[str], None],
) -> None:
    """A steady stream of sends; SIGKILL while it goes on, restart at once; the client never stops.

    Requests under way at the kill lose their answer: whether they were stored is unknown to the
    client, so they may go out (once) or not at all.
    """
    gateway = gateway_process
    wired_simulator(gateway.url)
    gateway.start()
    log = SendLog()
    stop = threading.Event()
    client = threading.Thread(
        target=send_many,
        args=(gateway.url, provisioned, log),
        kwargs={"total": 2000, "rate": 150.0, "concurrency": 4, "stop": stop},
        daemon=True,
    )
    try:
        client.start()
        wait_for(lambda: log.accepted_count() >= 150, timeout=20, interval=0.005, what="150 accepted")
        gateway.kill()
        report = snapshot_at_kill(simulator, provisioned, log)
        gateway.start()
        report.restart_seconds = gateway.start_seconds
        # Keep sending into the restarted process for a while: its first moments count too.
        after = report.accepted_before_kill + 100
        wait_for(lambda: log.accepted_count() >= after, timeout=30, interval=0.01, what="100 more accepted")
        stop.set()
        client.join(timeout=30)
        assert not client.is_alive()
        check_recovery(gateway, simulator, provisioned, log, report)
    except BaseException:
        stop.set()
        print(f"{gateway.logs()}\nnow: {diagnostics(provisioned.database_url)}; gateway pid {gateway.pid()}")
        raise


@pytest.mark.parametrize("down_seconds", [0, 3 + GRACE_SECONDS + 1], ids=["quick-restart", "long-outage"])
def test_killed_with_calls_in_flight_and_a_backlog(
    down_seconds: int,
    gateway_process: GatewayProcess,
    provisioned: Provisioned,
    simulator: Simulator,
    wired_simulator: Callable[[str], None],
) -> None:
    """A burst is accepted at once; SIGKILL while a round of upstream calls is under way, more behind it.

    Meta takes the first sends but their answers hang (a lost reply), and their status webhooks come
    late, so the kill finds Meta holding messages whose outcome the gateway never recorded. Their status
    webhooks reach the gateway only after the restart and must settle them: sending one again would
    be a double send, even after an outage longer than a send's lease. The backlog behind them must
    go out once.
    """
    gateway = gateway_process
    wired_simulator(gateway.url)
    hung = 6
    # Statuses come late, so that the kill lands before the gateway heard of the hung sends.
    simulator.configure(
        fail_next={"count": hung, "code": 408, "phone_number_id": MAIN["phone_number_id"]},
        slow_response_seconds=10.0,
        status_delays={"sent": 2.0, "delivered": 2.5},
    )
    gateway.start()
    log = SendLog()
    try:
        # 5 s of backlog on the 80/s channel, stored in one commit: the kill below comes right after the
        # first sends, whatever the machine's speed. (As 400 single requests, a slow machine accepted
        # them in more time than the channel took to drain them, and the kill found no backlog.)
        send_burst(gateway.url, provisioned, log, total=400)
        assert log.accepted_count() == 400, (log.connection_errors, log.other[:3])
        wait_for(
            lambda: len(sim_entries(simulator, log.attempted)) >= hung,
            timeout=20,
            interval=0.005,
            what=f"{hung} sends at the simulator",
        )
        gateway.kill()
        report = snapshot_at_kill(simulator, provisioned, log)
        assert report.outbox_at_kill["in_flight"] >= 1, report
        assert report.outbox_at_kill["ready"] > 0, report
        time.sleep(down_seconds)  # the outage itself: nothing runs meanwhile
        gateway.start()
        report.restart_seconds = gateway.start_seconds
        check_recovery(gateway, simulator, provisioned, log, report)
    except BaseException:
        print(f"{gateway.logs()}\nnow: {diagnostics(provisioned.database_url)}; gateway pid {gateway.pid()}")
        raise
