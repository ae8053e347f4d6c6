"""Faults upstream, injected with the simulator (issue 14, point 2): every accepted message ends in the
state its fault calls for, none is sent twice, no outbox row is left behind.

The faults are real: the simulator resets (TCP RST) or closes the send's connection, or holds it past
the gateway's read timeout, before or after it records the send (docs/simulator.md, "Connection
faults"); it answers 5xx and 130429, throttles the channel, answers slowly, sends every status webhook
10 times and in reverse order, and at the end posts all of them again in a concurrent burst.

What the gateway must make of it (docs/architecture.md, "Delivery guarantees"):

- the outcome of a send whose answer never came (reset, close, hang, 5xx) is unknown to it: it is never
  sent again; the status webhook, which carries the message id in `biz_opaque_callback_data`, settles
  it when Meta had it (the simulator logged it), otherwise it fails `upstream_unconfirmed` after the
  grace period;
- 130429 is retried until Meta takes the message; Meta's refusals fail with their code;
- every accepted message is in the simulator's send log at most once, and exactly once unless it
  failed as unconfirmed;
- at the end no outbox row of a send is left, no stored webhook is left unapplied, nothing is a dead
  letter.

The run's counts are printed (`-s`), for docs/reliability.md.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from support.app_in_thread import running_gateway, sql
from support.harness import (
    APP_SECRET,
    GLOBEX,
    MAIN,
    SECOND,
    Gateway,
    Simulator,
    new_number,
    wait_for,
)
from wagate.simulator import (
    MAGIC_HANG,
    MAGIC_RESET,
    MAGIC_RESET_AFTER_ACCEPT,
    MAGIC_SERVER_ERROR,
    MAGIC_SLOW,
    MAGIC_UNDELIVERABLE,
)
from wagate.simulator.app import create_simulator_app
from wagate.simulator.config import SimulatorConfig
from wagate.simulator.send_log import max_in_window
from wagate.simulator.server import start_in_thread

pytestmark = pytest.mark.timeout(300)

# tests/support/app_in_thread.py runs the gateway with a 2 s upstream timeout and a 3 s grace for unconfirmed
# sends; a hang lasts longer than the timeout.
HANG_SECONDS = 4.0
UNCONFIRMED = "upstream_unconfirmed"
BEFORE = ("reset_before", "close_before", "hang_before")
AFTER = ("reset_after", "close_after", "hang_after")
OTP = {"name": "otp_code", "language": "en", "parameters": ["424242"]}


@pytest.fixture(scope="module")
def faulty_sim() -> Iterator[Simulator]:
    """A simulator of this module's own: its switches (10x duplicates, a rate limit, faults waiting
    for any send) must not reach the other tests' sends."""
    config = SimulatorConfig(app_secret=APP_SECRET, slow_response_seconds=HANG_SECONDS)
    url, stop = start_in_thread(create_simulator_app(config))
    with httpx.Client(timeout=60) as http:
        for channel in (MAIN, SECOND, GLOBEX):
            http.post(f"{url}/_sim/channels", json=channel).raise_for_status()
        yield Simulator(url, http)
    stop()


@pytest.fixture(scope="module")
def gateway(database_url: str, faulty_sim: Simulator) -> Iterator[Gateway]:
    faulty_sim.http.post(f"{faulty_sim.url}/_sim/reset").raise_for_status()
    with running_gateway(database_url, faulty_sim) as running:
        yield running


@pytest.fixture(autouse=True)
def clean_switches(faulty_sim: Simulator) -> Iterator[None]:
    yield
    faulty_sim.configure(
        duplicate_statuses=1,
        reorder_statuses=False,
        read_enabled=False,
        rate_limit_per_second=None,
        response_latency_seconds=0,
        fail_next={"count": 0, "code": 0},
        fault_next=[],  # faults a failed test left unused
    )


def post_sends(gateway: Gateway, bodies: list[dict[str, Any]], workers: int = 12) -> list[str]:
    """POST every body at once from `workers` threads; each must be accepted (201). Message ids in order."""

    def one(body: dict[str, Any]) -> str:
        response = gateway.send(body)
        assert response.status_code == 201, response.text
        message_id: str = response.json()["id"]
        return message_id

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, bodies))


def post_batch(gateway: Gateway, numbers: list[str]) -> tuple[str, list[str]]:
    body = {"channel_id": gateway.ids["main"], "template": OTP, "phone_numbers": numbers}
    response = gateway.http.post(gateway.v1("/whatsapp/bulk_messages"), json=body, headers=gateway.headers())
    assert response.status_code == 202, response.text
    batch_id: str = response.json()["batch_id"]
    rows = sql(gateway.database_url, "SELECT id FROM messages WHERE batch_id = :b", b=batch_id)
    assert len(rows) == len(numbers)
    return batch_id, [str(r[0]) for r in rows]


def states(gateway: Gateway, ids: list[str]) -> dict[str, tuple[str, str | None, str | None]]:
    """(status, external_error, upstream_message_id) of each message, in one query."""
    found: dict[str, tuple[str, str | None, str | None]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ", ".join(f":m{i}" for i in range(len(chunk)))
        rows = sql(
            gateway.database_url,
            f"SELECT id, status, external_error, upstream_message_id FROM messages WHERE id IN ({marks})",  # noqa: S608 - placeholders only
            **{f"m{i}": m for i, m in enumerate(chunk)},
        )
        found.update({str(r[0]): (str(r[1]), r[2], r[3]) for r in rows})
    return found


def sim_log(sim: Simulator) -> dict[str, list[dict[str, Any]]]:
    """The simulator's accepted sends by the message id they carried (`biz_opaque_callback_data`)."""
    by_message: dict[str, list[dict[str, Any]]] = {}
    for entry in sim.messages():
        by_message.setdefault(entry["biz_opaque_callback_data"], []).append(entry)
    return by_message


def leftovers(gateway: Gateway) -> dict[str, int]:
    """What is left in the outbox (by kind and state), in dead letters and among parked statuses."""
    rows = sql(gateway.database_url, "SELECT kind, state, count(*) FROM outbox GROUP BY kind, state")
    left = {f"outbox {kind} {state}": int(n) for kind, state, n in rows}
    left["dead_letters"] = int(sql(gateway.database_url, "SELECT count(*) FROM dead_letters")[0][0])
    left["parked_statuses"] = int(sql(gateway.database_url, "SELECT count(*) FROM parked_statuses")[0][0])
    return {k: v for k, v in left.items() if v}


def drained(gateway: Gateway) -> dict[str, int]:
    """Waits until the simulator has no webhook pending and the gateway's outbox holds no send and no
    stored webhook; returns what else is left (the periodic jobs stay)."""
    wait_for(
        lambda: gateway.sim.http.get(f"{gateway.sim.url}/_sim/idle", params={"seconds": 5}).json()["idle"],
        timeout=120,
        interval=0.1,
        what="the simulator's webhooks to be delivered",
    )

    def settled() -> dict[str, int] | None:
        left = leftovers(gateway)
        busy = [k for k in left if k.startswith(("outbox send_message", "outbox meta_webhook"))]
        return None if busy else left or {"nothing": 0}

    return wait_for(settled, timeout=60, interval=0.2, what="the outbox to drain")


def outbox_diagnostics(gateway: Gateway, message_ids: list[str]) -> str:
    """What the outbox says of these messages' sends, and what else waits in it: for a failure's message."""
    marks = ", ".join(f":m{i}" for i in range(len(message_ids[:20])))
    rows = sql(
        gateway.database_url,
        "SELECT message_id, state, attempts, locked_by, locked_until, last_error FROM outbox"  # noqa: S608
        f" WHERE message_id IN ({marks})",
        **{f"m{i}": m for i, m in enumerate(message_ids[:20])},
    )
    webhooks = sql(
        gateway.database_url,
        "SELECT state, attempts, run_at, created_at, last_error FROM outbox WHERE kind = 'meta_webhook'"
        " ORDER BY created_at LIMIT 5",
    )
    letters = sql(gateway.database_url, "SELECT kind, reference, error FROM dead_letters LIMIT 5")
    return (
        f"now {sql(gateway.database_url, 'SELECT CURRENT_TIMESTAMP')[0][0]}; their send rows {rows[:10]}; "
        f"stored Meta webhooks {webhooks}; dead letters {letters}; leftovers {leftovers(gateway)}"
    )


def wait_final(
    gateway: Gateway, expected: dict[str, tuple[str, str | None]], timeout: float = 90.0
) -> dict[str, tuple[str, str | None, str | None]]:
    """Waits until every message has its expected (status, external_error prefix); fails with the diff."""
    deadline = time.monotonic() + timeout
    while True:
        now = states(gateway, list(expected))
        wrong = {
            m: (now.get(m), want)
            for m, want in expected.items()
            if m not in now or now[m][0] != want[0] or not (now[m][1] or "").startswith(want[1] or "")
        }
        if not wrong:
            return now
        if time.monotonic() > deadline:
            sample = dict(list(wrong.items())[:10])
            raise AssertionError(
                f"{len(wrong)} of {len(expected)} messages not in their state: {sample}; "
                f"{outbox_diagnostics(gateway, list(wrong))}"
            )
        time.sleep(0.2)


def test_each_fault_ends_its_message_in_the_right_state(gateway: Gateway, faulty_sim: Simulator) -> None:
    """Every kind of fault, each aimed at its own recipients, all at once, with slow answers and the
    statuses 10 times over in reverse order (read, delivered, sent)."""
    sim = faulty_sim
    sim.configure(
        duplicate_statuses=10, reorder_statuses=True, read_enabled=True, response_latency_seconds=0.5
    )
    plan: list[tuple[str, str, tuple[str, str | None], int]] = []  # (case, number, final, sends)
    for kind in (*BEFORE, *AFTER):
        for _ in range(3):
            number = new_number()
            sim.configure(fault_next={"count": 1, "kind": kind, "to": number})
            final = ("failed", UNCONFIRMED) if kind in BEFORE else ("read", None)
            plan.append((kind, number, final, 0 if kind in BEFORE else 1))
    throttled = new_number()
    sim.configure(fail_next={"count": 2, "code": 130429, "to": throttled})
    plan.append(("130429 twice", throttled, ("read", None), 1))
    plan += [
        ("magic reset", MAGIC_RESET, ("failed", UNCONFIRMED), 0),
        ("magic reset after accept", MAGIC_RESET_AFTER_ACCEPT, ("read", None), 1),
        ("magic hang", MAGIC_HANG, ("failed", UNCONFIRMED), 0),
        ("magic 500", MAGIC_SERVER_ERROR, ("failed", UNCONFIRMED), 0),
        ("magic slow (late 200)", MAGIC_SLOW, ("read", None), 1),
        ("magic 131026", MAGIC_UNDELIVERABLE, ("failed", "131026: Message undeliverable"), 1),
    ]
    plan += [("slow answer", new_number(), ("read", None), 1) for _ in range(20)]

    ids = post_sends(gateway, [{"phone_number": number, "template": OTP} for _, number, _, _ in plan])
    expected = {m: final for m, (_, _, final, _) in zip(ids, plan, strict=True)}
    final = wait_final(gateway, expected)
    left = drained(gateway)
    log = sim_log(sim)

    for message_id, (case, _, _, sends) in zip(ids, plan, strict=True):
        entries = log.get(message_id, [])
        assert len(entries) == sends, (case, message_id, entries)
        if entries:
            # Settled by the webhook when the answer was lost: the wamid Meta gave is the message's.
            assert final[message_id][2] == entries[0]["wamid"], case
        if case in AFTER or case == "magic reset after accept":
            assert entries[0]["answer_fault"] in (case, "reset_after"), case
    assert states(gateway, ids) == final  # the late duplicates changed nothing
    assert set(left) <= {"outbox sync_templates ready", "outbox purge_expired ready", "nothing"}, left
    # The API shows what the database holds.
    for message_id in ids[:: max(1, len(ids) // 10)]:
        shown = gateway.message(message_id)
        assert (shown["status"], shown.get("external_error")) == final[message_id][:2]

    burst = sim.http.post(
        f"{sim.url}/_sim/webhook_burst", json={"copies": 2, "per_post": 1, "concurrency": 100}
    ).json()
    assert burst["posts"] > 0 and burst["gave_up"] == 0, burst
    left = drained(gateway)
    assert states(gateway, ids) == final
    assert sim_log(sim) == log  # nothing was sent because of a webhook
    assert set(left) <= {"outbox sync_templates ready", "outbox purge_expired ready", "nothing"}, left
    cases = Counter(case for case, _, _, _ in plan)
    print(
        f"\n[{gateway.database_url.split(':')[0]}] each fault: {len(ids)} messages ({dict(cases)}), "
        f"{sum(len(log.get(m, [])) for m in ids)} sends, 0 twice, "
        f"{sum(1 for m in ids if m in log and log[m][0]['answer_fault'])} answers lost and settled by "
        "webhook, "
        f"{sum(1 for s in final.values() if (s[1] or '').startswith(UNCONFIRMED))} failed unconfirmed; "
        f"webhook burst {burst}"
    )


def test_a_storm_of_every_fault_at_once(gateway: Gateway, faulty_sim: Simulator) -> None:
    """Single sends and a bulk batch into a channel Meta throttles (130429 above 10 per second), while
    the first sends meet resets, closes and hangs before and after Meta has them and a burst of 503s,
    answers are slow and every status comes 10 times in reverse order. The faults hit whichever send
    comes, so the check is by invariant: a message Meta never logged failed unconfirmed, one it logged
    once was delivered with that wamid, none was logged twice; the counts match the faults injected."""
    sim = faulty_sim
    main = MAIN["phone_number_id"]
    faults = {
        "reset_before": 4,
        "reset_after": 4,
        "close_before": 2,
        "close_after": 2,
        "hang_before": 3,
        "hang_after": 3,
    }
    server_errors = 5
    sim.configure(
        duplicate_statuses=10,
        reorder_statuses=True,
        rate_limit_per_second=10,
        response_latency_seconds=0.3,
        fault_next=[{"count": n, "kind": kind, "phone_number_id": main} for kind, n in faults.items()],
        fail_next={"count": server_errors, "code": 503, "phone_number_id": main},
    )
    refused_before = sim.http.get(f"{sim.url}/_sim/stats").json()["refused"]
    singles = post_sends(gateway, [{"phone_number": new_number(), "template": OTP} for _ in range(60)])
    batch_id, bulk = post_batch(gateway, [new_number() for _ in range(40)])
    ids = singles + bulk

    def all_final() -> dict[str, tuple[str, str | None, str | None]] | None:
        now = states(gateway, ids)
        return now if all(s[0] in ("delivered", "failed") for s in now.values()) else None

    started = time.monotonic()
    try:
        final = wait_for(all_final, timeout=60, interval=0.3, what="every message to end delivered or failed")
    except AssertionError as exc:
        now = states(gateway, ids)
        open_ones = [m for m, state in now.items() if state[0] not in ("delivered", "failed")]
        raise AssertionError(f"{exc}; {outbox_diagnostics(gateway, open_ones)}") from None
    elapsed = time.monotonic() - started
    left = drained(gateway)
    final = states(gateway, ids)
    log = sim_log(sim)

    twice = {m: len(v) for m, v in log.items() if len(v) > 1}
    assert not twice, f"sent more than once: {twice}"
    never = [m for m in ids if m not in log]
    for message_id in never:
        status, error, _ = final[message_id]
        assert status == "failed" and (error or "").startswith(UNCONFIRMED), (message_id, final[message_id])
    for message_id in ids:
        if message_id in log:
            assert final[message_id][0] == "delivered", (message_id, final[message_id], log[message_id])
            assert final[message_id][2] == log[message_id][0]["wamid"]
    # Every fault that leaves Meta without the message failed one message; nothing else did.
    assert len(never) == sum(n for kind, n in faults.items() if kind in BEFORE) + server_errors
    lost_answers = [m for m in ids if m in log and log[m][0]["answer_fault"]]
    assert 0 < len(lost_answers) <= sum(n for kind, n in faults.items() if kind in AFTER)
    assert set(left) <= {"outbox sync_templates ready", "outbox purge_expired ready", "nothing"}, left
    batch = gateway.http.get(gateway.v1(f"/whatsapp/bulk_messages/{batch_id}"), headers=gateway.headers())
    assert batch.status_code == 200 and batch.json()["status"] == "completed", batch.text
    stats = sim.http.get(f"{sim.url}/_sim/stats").json()
    throttled = stats["refused"].get("130429", 0) - refused_before.get("130429", 0)
    assert throttled > 0  # Meta did throttle the channel: a storm of 130429 came
    ours = [e for m in ids for e in log.get(m, [])]
    busiest = max_in_window([e["received_at"] for e in ours])
    print(
        f"\n[{gateway.database_url.split(':')[0]}] storm: {len(ids)} messages (60 single, 40 bulk), "
        f"{len(ours)} sends, 0 twice, {len(lost_answers)} answers lost and "
        f"settled by webhook, {len(never)} failed unconfirmed (faults before Meta: "
        f"{sum(n for k, n in faults.items() if k in BEFORE)}, 503s: {server_errors}); "
        f"{throttled} answered 130429, most sends at Meta in any second: {busiest}; "
        f"{elapsed:.1f} s to the last final state"
    )


def test_a_send_after_the_faults_goes_at_once(gateway: Gateway) -> None:
    """The faults leave nothing behind that slows a plain send: no pause, no claimed row, no backlog."""
    response = gateway.send({"phone_number": new_number(), "template": OTP})
    assert response.status_code == 201, response.text
    gateway.wait_status(response.json()["id"], "delivered", timeout=10)
