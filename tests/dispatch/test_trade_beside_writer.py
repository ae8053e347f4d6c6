"""A single send posted into a batch goes out at once, and the batch goes on, while the worker's
writer is held up (PostgreSQL).

When a lane is full of a batch's rows and a single send comes, it claims the single send and gives
back as many bulk rows. The claim commits on a connection of its own; giving the rows back is a
write on the worker's writer, which can be busy for a while (a batch of several hundred statuses on
a busy machine). The lane must not wait for that write: in the scale-out test it did, and sent
nothing for 0.3-0.8 s every second or so.

Layout as deployed on PostgreSQL: `wagate serve --no-dispatcher` and `wagate worker`, the simulator
in a process of its own. While a batch runs, the test holds a row lock on the channel's claimed send
rows from a connection of its own, so the worker's writer stops at its next write to them (a send's
outcome) as it would behind a long batch, while claims, which skip locked rows, go on. Then an OTP
is posted: it reaches Meta within a second of its 201 and the batch keeps sending, both while the
lock is still held; once it is let go, every message has reached Meta exactly once.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from support.crash_matrix import fresh_database
from support.gateway_process import (
    GatewayProcess,
    WorkerProcess,
    free_port,
    provision,
    register_channel,
    sim_sends,
    simulator_process,
    simulator_wiring,
)
from support.harness import ADMIN_TOKEN, Simulator, new_number, provision_file, wait_for

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.alone,
]  # measures an OTP within a second while a batch runs
RATE = 40
BATCH = RATE * 8
OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
LOCK_SECONDS = 4.0
OTPS = 5


def test_a_trade_for_a_single_send_does_not_wait_for_the_writer(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if not request.getfixturevalue("postgres_available"):
        pytest.skip("no PostgreSQL server (set WAGATE_TEST_POSTGRES_URL); CI runs these")
    with simulator_process(tmp_path) as simulator, fresh_database("postgresql", tmp_path) as database_url:
        channel = register_channel(simulator, "Paced", RATE, ["admin@acme.test"])
        spec = provision_file()
        spec["accounts"][0]["channels"].append(channel)
        provisioned = provision(database_url, simulator, tmp_path, spec)
        channel_id = provisioned.channels["Paced"]
        api = GatewayProcess(provisioned.env, free_port(), tmp_path, args=("--no-dispatcher",), name="api")
        worker = WorkerProcess(provisioned.env, tmp_path, ops_port=free_port())
        with simulator_wiring(simulator) as wire:
            wire(api.url)
            api.start()
            worker.start()
            try:
                run(simulator, api, provisioned.account_id, channel_id, channel, database_url)
            finally:
                worker.stop()
                api.stop()


def run(
    simulator: Simulator,
    api: GatewayProcess,
    account_id: int,
    channel_id: int,
    channel: dict[str, Any],
    database_url: str,
) -> None:
    def sent() -> list[dict[str, Any]]:
        return sim_sends(simulator, channel["phone_number_id"])

    numbers = [new_number() for _ in range(BATCH)]
    url = f"{api.url}/v1/accounts/{account_id}/whatsapp"
    body = {"channel_id": channel_id, "template": OTP, "phone_numbers": numbers}
    response = httpx.post(f"{url}/bulk_messages", json=body, headers=HEADERS, timeout=30)
    assert response.status_code == 202, response.text
    wait_for(lambda: len(sent()) >= RATE, timeout=15, interval=0.05, what="a second of the batch at Meta")

    lock = psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://"))
    try:
        held = lock.execute(
            "SELECT id FROM outbox WHERE channel_id = %s AND kind = 'send_message' AND state = 'in_flight'"
            " FOR UPDATE",
            [channel_id],
        ).fetchall()
        assert held, "no claimed rows to hold: the batch is not under way"
        locked_at = time.monotonic()
        time.sleep(0.5)  # the writer reaches a locked row with the next outcome it records
        # A few, a moment apart: the first wakes a lane with room and is claimed with rows of the
        # batch to fill it; the next find it full and are traded for the batch's last rows.
        otps: dict[str, float] = {}
        for _ in range(OTPS):
            number = new_number()
            single = {"channel_id": channel_id, "phone_number": number, "template": OTP}
            response = httpx.post(f"{url}/messages", json=single, headers=HEADERS, timeout=10)
            assert response.status_code == 201, response.text
            otps[number.lstrip("+")] = time.monotonic()
            time.sleep(0.1)
        first = min(otps.values())
        at_meta = wait_for(
            lambda: (
                (got := {e["to"]: e["received_monotonic"] for e in sent() if e["to"] in otps}).keys()
                >= otps.keys()
                and got
            ),
            timeout=LOCK_SECONDS - 1,
            interval=0.02,
            what="the OTPs at Meta while the worker's writer waits",
        )
        window_end = first + 1.5
        time.sleep(max(0.0, window_end - time.monotonic()))
        assert time.monotonic() - locked_at < LOCK_SECONDS + 1, "the checks took longer than the lock"
        during = [e for e in sent() if first <= e["received_monotonic"] < window_end and e["to"] not in otps]
    finally:
        lock.close()  # rolls back: the writer goes on

    delays = sorted(at_meta[n] - otps[n] for n in otps)
    print(
        f"{len(held)} claimed rows locked; the OTPs at Meta {', '.join(f'{d * 1000:.0f}' for d in delays)} ms"
        f" after their 201s; {len(during)} of the batch at Meta in the 1.5 s after the first, the lock held"
    )
    assert delays[-1] < 1.0, f"an OTP reached Meta {delays[-1]:.2f} s after its 201"
    # The lane has half a second of rows in hand and claims more beside the writer: the batch goes on.
    assert len(during) >= RATE // 2, f"only {len(during)} of the batch sent in the 1.5 s after the OTPs came"

    wanted = {n.lstrip("+") for n in numbers} | otps.keys()
    entries = wait_for(
        lambda: (got := sent()) and {e["to"] for e in got} >= wanted and got,
        timeout=BATCH / RATE + 20,
        interval=0.2,
        what="every message at Meta",
    )
    twice = {n: c for n, c in Counter(e["to"] for e in entries).items() if c > 1}
    assert not twice, f"sent twice: {list(twice.items())[:5]}"
