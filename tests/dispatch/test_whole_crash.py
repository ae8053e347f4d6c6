"""Every dispatcher killed at once (issue 45, point 1): a machine failure, the out-of-memory killer, a bad
deploy. Run as an operator would, on each database:

- PostgreSQL: two `wagate serve` (one `--no-dispatcher`) and two `wagate worker`s;
- SQLite: one `wagate serve` (SQLite runs one dispatcher by design).

A 400-recipient batch on a channel paced at 20/s and 300 single OTPs offered at 40/s across the kill;
once the simulator has had some of them, every process that runs a dispatcher is SIGKILLed, and one new
dispatcher is started (a `wagate worker` on PostgreSQL, a `wagate serve` on SQLite). With the default
upstream timeout and grace period (a send's lease is 75 s), so that waiting out a dead owner's leases
shows.

Then: the first send comes within RESUME_LIMIT seconds of the new dispatcher running (ready); while the
backlog lasts the channel sends at its rate (at least RATE_SHARE of it); no 1 s window holds more than
the rate (never two dispatchers pacing the channel); every accepted message reached the simulator
at most once; none is left in the outbox. A single send the dead held in flight is settled within
seconds on PostgreSQL, where an API process received Meta's webhooks all along: delivered by its
status, or `failed` with `upstream_unconfirmed` when none came (DESIGN.md: never sent twice), so every
OTP has its answer within SINGLES_LIMIT seconds of the new dispatcher running; nothing else fails. On
SQLite the receiver died too, and they wait out their lease (75 s). The batch's rows go exactly once.
The clock is CLOCK_MONOTONIC, one for every process of the machine: the simulator stamps each send
with it. The figures are printed (and recorded for
the test summary: `make test` shows them).
"""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.crash_matrix import fresh_database
from support.gateway_process import (
    GatewayProcess,
    ManagedProcess,
    WorkerProcess,
    free_port,
    gateway_env,
    max_in_window,
    outbox_sends,
    provision,
    query,
    register_channel,
    sim_sends,
    simulator_process,
)
from support.harness import ADMIN_TOKEN, Simulator, new_number, provision_file, wait_for

# Measures the time to resume and the rate: solo, with nothing beside it (beside two other alone
# tests, with a 35 s lease on SQLite, 20 of its 300 single sends once stayed `sent` for 240 s without
# their statuses: not understood yet, and not seen when it runs on its own).
pytestmark = pytest.mark.solo

RATE = 20
BATCH = 400
SINGLES = 300
KILL_AFTER = 60  # sends at the simulator before the kill
RESUME_LIMIT = 5.0
# The singles' backlog at the rate (about 12 s), or a dead owner's single's wait for its status (the
# upstream timeout and 5 s from the new dispatcher's first look), with room for a busy machine.
SINGLES_LIMIT = 30.0
RATE_SHARE = 0.9
OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# The defaults, not the short ones of the other process tests: a dead owner's lease is then 75 s.
GRACE = 60
DEFAULT_TIMEOUTS = {
    "WAGATE_UPSTREAM_TIMEOUT_SECONDS": "15",
    "WAGATE_UNCONFIRMED_SEND_GRACE_SECONDS": str(GRACE),
}


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgresql" and not request.getfixturevalue("postgres_available"):
        pytest.skip("no PostgreSQL server (set WAGATE_TEST_POSTGRES_URL); CI runs these")
    return str(request.param)


@pytest.fixture
def world(
    backend: str, tmp_path: Path
) -> Iterator[tuple[str, Simulator, dict[str, Any], dict[str, str], int]]:
    with simulator_process(tmp_path) as simulator, fresh_database(backend, tmp_path) as database_url:
        channel = register_channel(simulator, "Paced", RATE, ["admin@acme.test"])
        spec = provision_file()
        spec["accounts"][0]["channels"].append(channel)
        provisioned = provision(database_url, simulator, tmp_path, spec)
        env = gateway_env(database_url, simulator) | DEFAULT_TIMEOUTS | {"WAGATE_LOG_LEVEL": "warning"}
        yield database_url, simulator, channel, env, provisioned.channels["Paced"]


def post(urls: list[str], path: str, body: dict[str, Any], want: int) -> dict[str, Any]:
    """Posted with an Idempotency-Key until answered, to the next API process after a failure (one of
    them may be killed meanwhile)."""
    key = str(uuid.uuid4())
    with httpx.Client(timeout=30) as http:
        for attempt in range(100):
            url = urls[attempt % len(urls)] + path
            try:
                response = http.post(url, json=body, headers={**HEADERS, "Idempotency-Key": key})
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            if response.status_code == want:
                answer: dict[str, Any] = response.json()
                return answer
            assert response.status_code >= 500 or response.status_code == 409, response.text
            time.sleep(0.1)
    raise AssertionError(f"{path} never answered {want}")


def message_states(database_url: str, ids: set[str]) -> Counter[str]:
    rows = query(database_url, "SELECT id, status FROM messages")
    return Counter(str(status) for message_id, status in rows if message_id in ids)


def failures(database_url: str) -> dict[str, str]:
    rows = query(database_url, "SELECT id, external_error FROM messages WHERE status = 'failed'")
    return {str(message_id): str(error) for message_id, error in rows}


def singles_in_flight(database_url: str) -> set[str]:
    """The single sends claimed by a dispatcher (the dead ones, right after the kill)."""
    sql = (
        "SELECT message_id FROM outbox WHERE kind = 'send_message' AND priority = 0"
        " AND state IN ('in_flight', 'unconfirmed')"
    )
    return {str(row[0]) for row in query(database_url, sql)}


def test_every_dispatcher_killed_resumes_within_seconds_at_the_rate(
    world: tuple[str, Simulator, dict[str, Any], dict[str, str], int],
    backend: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    database_url, simulator, channel, env, channel_id = world
    processes: list[ManagedProcess] = []
    try:
        if backend == "postgresql":
            dispatching: list[ManagedProcess] = [GatewayProcess(env, free_port(), tmp_path, name="api1")]
            api = GatewayProcess(env, free_port(), tmp_path, args=("--no-dispatcher",), name="api2")
            dispatching += [
                WorkerProcess(env, tmp_path, name=f"worker{n}", ops_port=free_port()) for n in (1, 2)
            ]
            processes += [*dispatching, api]
        else:
            api = GatewayProcess(env, free_port(), tmp_path, name="serve")
            dispatching = [api]
            processes.append(api)
        for process in processes:
            process.start()
        # Meta's status webhooks go to an API process that survives (retried while none answers).
        simulator.configure(webhook_url=f"{api.url}/webhooks/whatsapp")
        api_urls = [f"{p.url}/v1/accounts/1" for p in processes if isinstance(p, GatewayProcess)]
        numbers = [new_number() for _ in range(BATCH)]
        bulk = {"channel_id": channel_id, "template": OTP, "phone_numbers": numbers}
        batch = post(api_urls, "/whatsapp/bulk_messages", bulk, 202)
        # The single OTPs go on arriving, at twice the channel's rate, across the kill.
        pool = concurrent.futures.ThreadPoolExecutor(4)
        single = {"channel_id": channel_id, "template": OTP}

        offered = time.monotonic()

        def otp(n: int) -> dict[str, Any]:
            time.sleep(max(0.0, offered + n / (2 * RATE) - time.monotonic()))
            return post(
                api_urls[n % len(api_urls) :] + api_urls,
                "/whatsapp/messages",
                single | {"phone_number": new_number()},
                201,
            )

        answers = [pool.submit(otp, n) for n in range(SINGLES)]
        wait_for(lambda: len(sim_sends(simulator, channel["phone_number_id"])) >= KILL_AFTER, timeout=60)
        for process in dispatching:
            process.kill()
        killed_at = time.monotonic()
        before = {s["biz_opaque_callback_data"] for s in sim_sends(simulator, channel["phone_number_id"])}
        in_flight = dict(outbox_sends(database_url))
        dead_singles = singles_in_flight(database_url)
        fresh: ManagedProcess
        if backend == "postgresql":
            fresh = WorkerProcess(env, tmp_path, name="worker3", ops_port=free_port())
        else:
            fresh = api
        processes.append(fresh)
        started = time.monotonic()
        fresh.start()

        ids = {answer.result()["id"] for answer in answers}
        pool.shutdown()
        # A fresh database: its one batch is this one.
        batch_ids = {
            str(row[0]) for row in query(database_url, "SELECT id FROM messages WHERE batch_id IS NOT NULL")
        }
        assert batch["accepted"] == BATCH
        accepted = ids | batch_ids
        assert len(accepted) == BATCH + SINGLES
        ready = started + fresh.start_seconds  # its /readyz answered: imports done, dispatcher on
        final = {"delivered", "read", "failed"}
        wait_for(
            lambda: set(message_states(database_url, ids)) <= final,
            timeout=240,
            interval=0.25,
            what=f"every single send settled: {dict(message_states(database_url, ids))}",
        )
        singles_done = time.monotonic() - ready

        def settled() -> bool:
            return not outbox_sends(database_url) and len(message_states(database_url, accepted)) > 0

        wait_for(
            settled,
            timeout=240,
            interval=0.5,
            what=f"the outbox to drain: {dict(outbox_sends(database_url))}",
        )
        sends = sim_sends(simulator, channel["phone_number_id"])
        by_message = Counter(s["biz_opaque_callback_data"] for s in sends)
        after = sorted(s["received_monotonic"] for s in sends if s["received_monotonic"] > started)
        assert after, "nothing was sent after the new dispatcher started"
        # Measured from the moment it runs: a process's start-up is the machine's, and took 1.6-5.1 s
        # on the 2-core machine under load.
        resume = after[0] - ready
        left = len(accepted) - len(before)
        # The backlog's sends after the restart, the few whose outcome waited out a grace aside.
        backlog = after[: max(2, int(left * 0.95))]
        rate = (len(backlog) - 1) / (backlog[-1] - backlog[0]) if backlog[-1] > backlog[0] else float("inf")
        states = message_states(database_url, accepted)
        failed = {m: error for m, error in failures(database_url).items() if m in accepted}
        figures = (
            f"whole crash ({backend}): {len(before)} sent before the kill, outbox then {in_flight}"
            f" ({len(dead_singles)} single);"
            f" start-up {fresh.start_seconds:.1f} s; first send {resume:.2f} s after the new one was ready"
            f" ({after[0] - killed_at:.2f} s after the kill); {len(after)} after it at {rate:.1f}/s;"
            f" all done {after[-1] - killed_at:.1f} s after the kill"
            f" ({after[-1] - ready:.1f} s after it was ready); every single settled {singles_done:.1f} s"
            f" after it was ready; most in a 1 s window"
            f" {max_in_window([s['received_monotonic'] for s in sends])}; states {dict(states)}"
        )
        print(figures)
        request.node.user_properties.append(("figures", figures))  # `make test` prints them at its end
        twice = [message for message, count in by_message.items() if count > 1]
        assert not twice, f"sent twice: {twice[:5]}"
        assert max_in_window([s["received_monotonic"] for s in sends]) <= RATE
        never = {m for m in accepted if m not in by_message}
        assert never <= set(failed), f"{len(never - set(failed))} never sent and not failed"
        # Only a single the dead held may fail, and only as unconfirmed; the batch goes whole.
        assert set(failed) <= dead_singles, failed
        assert all(error.startswith("upstream_unconfirmed") for error in failed.values()), failed
        assert all(by_message[m] == 1 for m in batch_ids)
        assert resume <= RESUME_LIMIT, figures
        assert rate >= RATE * RATE_SHARE, figures
        if backend == "postgresql":
            assert singles_done <= SINGLES_LIMIT, figures
    finally:
        for process in processes:
            process.stop()
