"""A channel driven past its rate for longer than a send's lease: every message goes out exactly once.

The suspicion this settles (issue 9, item 2): rows that wait in a lane's memory longer than their lease
(call timeout + grace; 5 s here) look orphaned to `release_unconfirmed`, are made ready again and are
claimed a second time while the first copy still waits, so both would go to Meta. Here a 20/s channel
gets single sends (each one wakes its lane, through NOTIFY when another process stored it) and a bulk
batch, about 20 s of backlog, and its sending process is SIGKILLed and restarted half way. On PostgreSQL
two `wagate serve` processes share the database: the singles are posted to both, and whichever owns the
channel sends while the other wakes it by NOTIFY; the owner is the one killed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

import support.gateway_process as machinery
from support.gateway_process import (
    GatewayProcess,
    Provisioned,
    diagnostics,
    free_port,
    outbox_sends,
    provision,
    query,
    register_channel,
    sim_sends,
)
from support.harness import ADMIN_TOKEN, Simulator, new_number, provision_file, wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.alone]  # measures a channel at three times its rate

RATE = 20  # the Flood channel's messages per second
# Singles come in at three times the rate for 6 s, each waking the lane: the backlog grows for longer
# than a lease. With the batch, 420 sends: 21 s at the channel's rate, four times a send's lease.
SINGLES_PER_SECOND = 3 * RATE
SINGLES_SECONDS = 6
BATCH = 60
OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

wired_simulator = machinery.wired_simulator


@pytest.fixture(scope="module")
def flood_channel(database_url: str, simulator: Simulator) -> dict[str, Any]:
    return register_channel(simulator, "Flood", RATE, ["admin@acme.test"])


@pytest.fixture(scope="module")
def provisioned(
    database_url: str,
    simulator: Simulator,
    flood_channel: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Provisioned:
    spec = provision_file()
    spec["accounts"][0]["channels"].append(flood_channel)
    return provision(database_url, simulator, tmp_path_factory.mktemp("overload"), spec)


def post_single(http: httpx.Client, gateway: GatewayProcess, provisioned: Provisioned) -> str:
    url = f"{gateway.url}/v1/accounts/{provisioned.account_id}/whatsapp/messages"
    body = {"channel_id": provisioned.channels["Flood"], "phone_number": new_number(), "template": OTP}
    response = http.post(url, json=body, headers=HEADERS)
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    return message_id


def post_batch(gateway: GatewayProcess, provisioned: Provisioned) -> str:
    url = f"{gateway.url}/v1/accounts/{provisioned.account_id}/whatsapp/bulk_messages"
    numbers = [new_number() for _ in range(BATCH)]
    body = {"channel_id": provisioned.channels["Flood"], "template": OTP, "phone_numbers": numbers}
    response = httpx.post(url, json=body, headers=HEADERS, timeout=30)
    assert response.status_code == 202, response.text
    batch_id: str = response.json()["batch_id"]
    return batch_id


class HeldSends(threading.Thread):
    """Samples how many of the channel's sends are claimed (`in_flight`) at once while it runs."""

    def __init__(self, database_url: str, channel_id: int) -> None:
        super().__init__(daemon=True)
        # An int of our own provisioning, not outside input.
        self.sql = f"SELECT count(*) FROM outbox WHERE state = 'in_flight' AND channel_id = {int(channel_id)}"  # noqa: S608
        self.database_url = database_url
        self.most = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            self.most = max(self.most, int(query(self.database_url, self.sql)[0][0]))

    def stop(self) -> None:
        self.done.set()
        self.join()


def channel_owner(processes: list[GatewayProcess], database_url: str) -> GatewayProcess:
    """The process that sends for the channel: on PostgreSQL the holder of its claims; on SQLite the one."""
    if len(processes) == 1:
        return processes[0]

    def holder() -> GatewayProcess | None:
        rows = query(database_url, "SELECT DISTINCT locked_by FROM outbox WHERE state = 'in_flight'")
        pids = {str(row[0]).rsplit(":", 1)[-1] for row in rows if row[0]}
        return next((p for p in processes if str(p.pid()) in pids), None)

    return wait_for(holder, timeout=10, interval=0.05, what="a process to claim the channel's sends")


def test_a_channel_past_its_rate_for_longer_than_a_lease_sends_each_message_once(
    provisioned: Provisioned,
    simulator: Simulator,
    wired_simulator: Any,
    flood_channel: dict[str, Any],
    tmp_path: Path,
) -> None:
    on_postgres = not provisioned.database_url.startswith("sqlite")
    processes = [
        GatewayProcess(provisioned.env, free_port(), tmp_path / f"gateway-{n}")
        for n in range(2 if on_postgres else 1)
    ]
    for process in processes:
        process.log_dir.mkdir()
        process.start()
    # Meta's webhooks go to the first process; on PostgreSQL either one stores them for the owner.
    wired_simulator(processes[0].url)
    try:
        batch_id = post_batch(processes[-1], provisioned)
        held = HeldSends(provisioned.database_url, provisioned.channels["Flood"])
        held.start()
        started = time.monotonic()
        with httpx.Client(timeout=30) as http, ThreadPoolExecutor(max_workers=8) as pool:
            posts = []
            for n in range(SINGLES_PER_SECOND * SINGLES_SECONDS):
                # A steady stream, not one burst: every post wakes the lane on its own.
                time.sleep(max(0.0, started + n / SINGLES_PER_SECOND - time.monotonic()))
                posts.append(pool.submit(post_single, http, processes[n % len(processes)], provisioned))
            singles = [post.result() for post in posts]
        # Half way through the backlog the sending process dies and comes back.
        time.sleep(4)
        held.stop()
        owner = channel_owner(processes, provisioned.database_url)
        owner.kill()
        owner.start()

        wait_for(
            lambda: not outbox_sends(provisioned.database_url),
            timeout=120,
            interval=0.2,
            what="the outbox to hold no send rows",
        )
        entries = sim_sends(simulator, flood_channel["phone_number_id"])
        sent = Counter(e["biz_opaque_callback_data"] for e in entries)
        batch = httpx.get(
            f"{processes[0].url}/v1/accounts/{provisioned.account_id}/whatsapp/bulk_messages/{batch_id}",
            headers=HEADERS,
        ).json()
        batch_messages = {r["message_id"] for r in batch["recipients"]}
        expected = set(singles) | batch_messages
        doubled = {m: c for m, c in sent.items() if c > 1}
        print(
            f"{len(expected)} messages, {len(entries)} sends at the simulator, {len(doubled)} sent more than "
            f"once; at most {held.most} held in_flight at once; {diagnostics(provisioned.database_url)}"
        )
        assert len(batch_messages) == BATCH
        # A lane claims half a second ahead and has at most twice its rate of calls open; every wake
        # used to claim more on top, until rows waited in memory past their lease.
        assert held.most <= RATE // 2 + 2 * RATE, f"the lane held up to {held.most} sends at once"
        assert not doubled, (
            f"{len(doubled)} messages went to Meta more than once: {list(doubled.items())[:5]}"
        )
        assert set(sent) == expected, (
            f"missing {len(expected - set(sent))}, unknown {len(set(sent) - expected)}"
        )
    except AssertionError:
        for process in processes:
            print(process.logs())
        raise
    finally:
        for process in processes:
            process.stop()
