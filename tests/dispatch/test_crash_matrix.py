"""The crash matrix, bounded (docs/reliability.md; the full run is scripts/crash_matrix.py).

One run per database of 300 messages (200 single sends at 80/s and a batch of 100, every request with
an Idempotency-Key and repeated until answered) on a channel of its own, with status webhooks coming
back from the simulator (its own process) and an account webhook for `message_created`,
`message_updated` and `batch_completed` delivered to a receiver on loopback, while `wagate` processes
are SIGKILLed at 4 moments drawn from a seeded generator (the seed is printed; WAGATE_CRASH_SEED
repeats a run) and restarted, at once or after a pause:

- SQLite: the one `wagate serve`;
- PostgreSQL: a `wagate serve` with its dispatcher beside a `wagate worker`, killed in turn (a
  channel's sends and the events move from one to the other and back).

After the run has settled, every accepted message reached the simulator exactly once and is
`delivered`, every event its status history calls for reached the receiver (repeats of one delivery
are allowed: events are at least once), none twice under two ids, and no outbox row is left.
A delivery claimed by a killed process is posted again after its lease (WAGATE_EVENT_LEASE_SECONDS,
15 s here), a stored Meta webhook after 30 s: most of the settling.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

import support.crash_matrix as engine
import support.gateway_process as machinery
from support.gateway_process import (
    GRACE_SECONDS,
    UPSTREAM_TIMEOUT_SECONDS,
    GatewayProcess,
    Provisioned,
    query,
)
from support.harness import ADMIN_TOKEN, Simulator, new_number, wait_for
from wagate.dispatch import jobs
from wagate.outbox.models import JobKind

pytestmark = [pytest.mark.timeout(300), pytest.mark.alone]  # measures SIGKILLs at moments, and settle times

SPEC = engine.RunSpec(messages=300, batch=100, kills=4, settle_timeout=150.0)


@pytest.mark.parametrize("name", ["serve-sqlite", "mixed-postgresql"])
def test_sigkills_lose_nothing_and_send_nothing_twice(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    scenario = engine.SCENARIOS[name]
    if scenario.backend == "postgresql" and not request.getfixturevalue("postgres_available"):
        pytest.skip("no PostgreSQL server (set WAGATE_TEST_POSTGRES_URL); CI runs these")
    seed = int(os.environ.get("WAGATE_CRASH_SEED") or random.SystemRandom().randrange(10**9))
    print(f"crash matrix ({scenario.describe()}): seed {seed} (WAGATE_CRASH_SEED={seed} repeats it)")
    [result] = engine.run_scenario(scenario, 1, SPEC, seed, tmp_path)
    print(engine.table([result]))
    assert len(result.kills) == SPEC.kills
    if scenario.victims == "any":
        assert {k.victim.rstrip("0123456789") for k in result.kills} == {"serve", "worker"}
    assert result.accepted == SPEC.messages and result.batch_accepted == SPEC.batch, result.refused[:3]
    assert result.lost == 0, result.samples["lost"]
    assert result.sent_twice == 0, result.samples["sent_twice"]
    # A single a killed dispatcher held may end failed `upstream_unconfirmed`, sent once or never.
    assert result.sent_once >= SPEC.messages - result.unconfirmed
    assert result.events_expected >= 2 * SPEC.messages + 1  # created and delivered each, the batch
    assert result.events_lost == 0, result.samples["events_lost"]
    assert result.events_doubled == 0 and result.events_unexpected == 0, result.samples
    assert result.problems() == [], f"seed {seed}: {result.problems()}; samples {result.samples}"


# --- A double send the matrix found (fixed by b8c7692) --------------------------------------------------

provisioned = machinery.provisioned
wired_simulator = machinery.wired_simulator


def claim_stored_webhooks_as_a_dead_process(database_url: str) -> int:
    """What a dispatcher SIGKILLed between claiming stored Meta webhook bodies and applying them leaves
    behind: the bodies claimed (the dispatcher's own `claim_jobs`) by a process that is gone."""
    url = database_url.replace("sqlite+aiosqlite://", "sqlite://")
    engine_ = create_engine(url)
    try:
        with Session(engine_) as session, session.begin():
            claimed = jobs.claim_jobs(
                session, kind=JobKind.meta_webhook, limit=100, worker_id="crashed-host:999999"
            )
        return len(claimed)
    finally:
        engine_.dispose()


@pytest.mark.parametrize("claimed", [False, True], ids=["stored", "claimed-by-the-dead"])
def test_a_stored_status_stops_the_resend_of_a_send_whose_answer_was_lost(
    claimed: bool,
    provisioned: Provisioned,
    simulator: Simulator,
    wired_simulator: Callable[[str], None],
    tmp_path: Path,
) -> None:
    """Meta took the send, but the gateway was killed before it heard the answer; the `sent` status
    webhook then came in and was stored (200 to Meta, which will not send it again). `claimed`: the
    process that claimed it to apply it was killed too. The restarted gateway must not send the message
    again either way.

    The matrix met the second case: stored statuses left claimed by a killed dispatcher (then for a
    300 s lease), and meanwhile 4 of 1,000 messages sent again. Here the second kill's moment is made
    exact by claiming the stored body with the dispatcher's own claim, as a dispatcher killed right
    after that claim's commit leaves it. Fixed: orphaned sends are not judged while a stored status
    from before waits, and such a claim lasts 30 s.
    """
    port = machinery.free_port()
    gateway = GatewayProcess(provisioned.env, port, tmp_path, name="serve")
    # The same address, so Meta's retried webhook finds it: the API alone, which stores and applies nothing.
    api_only = GatewayProcess(provisioned.env, port, tmp_path, args=("--no-dispatcher",), name="api")
    number = new_number()
    wired_simulator(gateway.url)
    simulator.configure(
        fail_next={"count": 1, "code": 408, "to": number.lstrip("+")},  # Meta has it; the answer hangs
        slow_response_seconds=20.0,
        # `sent` must reach the gateway only after it is killed: had it come sooner, that gateway would
        # have stored and claimed it itself (CI met that once, at 1 s, under load), and the case would
        # not be the one named.
        status_delays={"sent": 3.0, "delivered": 60.0, "read": 60.0},
        webhook_retry_cap=0.5,
    )
    try:
        gateway.start()
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        body = {
            "channel_id": provisioned.channel_id,
            "phone_number": number,
            "template": {"name": "otp_code", "language": "en", "parameters": ["123456"]},
        }
        url = f"{gateway.url}/v1/accounts/{provisioned.account_id}/whatsapp/messages"
        response = httpx.post(url, json=body, headers=headers, timeout=10)
        assert response.status_code == 201, response.text
        wait_for(lambda: simulator.messages(number), timeout=10, what="the send at the simulator")
        gateway.kill()  # the answer never came: the send row stays in flight
        api_only.start()
        wait_for(
            lambda: query(provisioned.database_url, "SELECT 1 FROM outbox WHERE kind = 'meta_webhook'"),
            timeout=15,
            what="the `sent` status stored",
        )
        api_only.kill()
        if claimed:
            assert claim_stored_webhooks_as_a_dead_process(provisioned.database_url) >= 1
        gateway.start()
        # The send's lease (timeout + grace) runs out, and the dispatcher has been up a whole grace; a
        # claimed body waits out its own lease (30 s) first. The stored `sent` settles the send.
        [first] = simulator.messages(number)
        message_url = f"{url}/{response.json()['id']}"
        wait_for(
            lambda: httpx.get(message_url, headers=headers).json()["upstream_message_id"] == first["wamid"],
            timeout=60,
            interval=0.2,
            what="the stored status to settle the send",
        )
        time.sleep(UPSTREAM_TIMEOUT_SECONDS + 2 * GRACE_SECONDS)  # a resend would have gone by now
        sends = simulator.messages(number)
        assert len(sends) == 1, f"sent {len(sends)} times: {[s['wamid'] for s in sends]}"
    finally:
        gateway.stop()
        api_only.stop()
