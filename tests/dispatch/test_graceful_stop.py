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

import pytest
from test_crash_recovery import SendLog, send_many, sim_entries

import gateway_process as machinery
from gateway_process import GatewayProcess, Provisioned, diagnostics, outbox_sends, query
from support import Simulator, wait_for

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
