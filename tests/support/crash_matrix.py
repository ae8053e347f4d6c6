"""The crash matrix's machinery: runs of sends with SIGKILLs at random moments, then the counts.

Used by tests/dispatch/test_crash_matrix.py (a bounded run in CI) and scripts/crash_matrix.py (the full
matrix). A scenario is a database and a set of `wagate` processes (tests/support/gateway_process.py); a run is
one client load on a channel of its own, with status webhooks coming back from the simulator (its own
process) and an account webhook subscribed to the message and batch events, delivered to a receiver in
this process (tests/support/receiver.py), while the scenario's victims (`serve`, or `worker`) are SIGKILLed
and restarted at moments drawn from a seeded random generator.

The client sends as a careful client would: every single send and the batch carry an
`Idempotency-Key`, and a request whose answer was lost (connection refused or cut, a timeout, a 5xx, a
409 for a key still in use) is repeated with the same key until it is answered. So every intended
message is "accepted" in the end (a 201, or a recipient of the batch's 202), and each must reach the
simulator exactly once: the simulator's log, keyed by `biz_opaque_callback_data` and by number (every
send goes to a number of its own), shows what was lost (0 sends) and what was sent twice (more than
one). After the run everything settles (no send, Meta webhook, event or report row left in the
outbox, the batch completed, the simulator's webhooks all delivered) and the events the receiver got
are compared with the events the messages' final states call for: `message_created` once per message,
`message_updated` once per status change of its `status_history`, `batch_completed` once per batch.
Events are delivered at least once (API.md section 8: `webhook-id` is stable across retries so a
receiver can drop a repeat): a repeat of a delivery is counted, not failed; two different deliveries
of one change would be a double event and fail.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import itertools
import json
import random
import secrets
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import psycopg

from support.gateway_process import (
    GRACE_SECONDS,
    UPSTREAM_TIMEOUT_SECONDS,
    GatewayProcess,
    ManagedProcess,
    WorkerProcess,
    free_port,
    gateway_env,
    provision,
    query,
    register_channel,
    sim_sends,
    simulator_process,
)
from support.harness import ADMIN_TOKEN, Simulator, new_number, postgres_admin_url, provision_file
from support.receiver import Receiver
from wagate.core.cache import DEFAULT_TTL_SECONDS as SUBSCRIPTIONS_CACHE_SECONDS

HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
EVENTS = ["message_created", "message_updated", "batch_completed"]
# The outbox rows that are work in progress of a run (periodic jobs stay for good).
WORK_KINDS = ("send_message", "meta_webhook", "deliver_event", "status_report")
# A send claimed by a process that died is another process's to settle or resend after this.
SEND_LEASE_SECONDS = UPSTREAM_TIMEOUT_SECONDS + GRACE_SECONDS


@dataclass(frozen=True)
class Scenario:
    """A database and the processes that run on it; `victims` says which of them are killed."""

    name: str
    backend: str  # sqlite | postgresql
    api: int  # `wagate serve` processes
    api_dispatches: bool  # whether they run the dispatcher (else `--no-dispatcher`)
    workers: int  # `wagate worker` processes
    victims: str  # serve | worker | any

    def describe(self) -> str:
        serve = "serve" if self.api_dispatches else "serve --no-dispatcher"
        parts = [f"{self.api} x {serve}"] + ([f"{self.workers} x worker"] if self.workers else [])
        return f"{self.backend}: {' + '.join(parts)}; SIGKILL of {self.victims}"


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("serve-sqlite", "sqlite", 1, True, 0, "serve"),
        Scenario("serve-postgresql", "postgresql", 1, True, 0, "serve"),
        Scenario("worker-postgresql", "postgresql", 2, False, 2, "worker"),
        # The bounded test's one run on PostgreSQL: a serve with its dispatcher beside a worker, each
        # killed in turn (a channel's sends and the events move between them).
        Scenario("mixed-postgresql", "postgresql", 1, True, 1, "any"),
    )
}


@dataclass(frozen=True)
class RunSpec:
    messages: int = 1000  # singles + the batch
    batch: int = 400
    kills: int = 5
    single_rate: float = 80.0  # single sends offered per second
    channel_rate: int = 100  # the channel's messages_per_second
    concurrency: int = 4
    settle_timeout: float = 180.0  # what a killed process claimed waits out its lease (15 s, 30 s)


@dataclass
class Kill:
    at: float  # seconds into the run
    victim: str
    down: float  # seconds between the kill and the restart
    accepted: int  # accepted by the client so far
    upstream: int  # at the simulator so far
    sends_in_flight: (
        int  # send rows in flight at the kill (some may be a dead process's, awaiting their lease)
    )
    events_claimed: int  # deliveries claimed for a POST at the kill (likewise)
    restart_seconds: float = 0.0
    # The single sends the victim held claimed at the kill: a live dispatcher settles them within
    # seconds, delivered by Meta's status or failed `upstream_unconfirmed` (unsettled.await_status_of_dead).
    held_singles: list[str] = field(default_factory=list)


@dataclass
class RunResult:
    scenario: str
    run: int
    intended: int = 0
    accepted: int = 0  # 201s + the batch's accepted recipients
    batch_accepted: int = 0
    unanswered: int = 0  # sends the client gave up on (no answer before its deadline)
    retried: int = 0  # requests repeated with their key after a lost answer
    refused: list[str] = field(default_factory=list)  # 4xx the client did not expect
    sent_once: int = 0
    lost: int = 0  # accepted, never at the simulator (and not failed)
    sent_twice: int = 0  # messages (or numbers) at the simulator more than once
    failed: int = 0  # accepted, ended `failed` (nothing was injected: each one is a finding)
    # ... except a single send a killed dispatcher held, failed `upstream_unconfirmed` (DESIGN.md:
    # an outcome nobody knows may end failed, never sent twice): counted apart, allowed
    unconfirmed: int = 0
    not_delivered: int = 0  # accepted, not `delivered` after settling (and not failed)
    unaccepted_stored: int = 0  # messages of the run's channel no answer of ours names
    events_expected: int = 0
    events_delivered: int = 0  # distinct expected events the receiver got
    events_lost: int = 0
    event_repeats: int = 0  # the same delivery (webhook-id) received again: allowed, at least once
    events_doubled: int = 0  # one change delivered under two webhook-ids
    events_unexpected: int = 0
    bad_signatures: int = 0
    deliveries_undelivered: int = 0  # deliveries rows not `delivered` after settling
    outbox_left: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    sim_webhooks_given_up: int = 0
    settled: bool = False
    settle_seconds: float = 0.0
    seconds: float = 0.0
    kills: list[Kill] = field(default_factory=list)
    samples: dict[str, list[str]] = field(default_factory=dict)  # a few ids per problem

    def problems(self) -> list[str]:
        """What makes the run fail: loss, double send, lost or doubled events, anything left stuck."""
        found = []
        checks = {
            "accepted messages lost": self.lost,
            "messages sent twice": self.sent_twice,
            "messages failed": self.failed,
            "messages not delivered": self.not_delivered,
            "sends the client never got answered": self.unanswered,
            "events lost": self.events_lost,
            "events doubled": self.events_doubled,
            "unexpected events": self.events_unexpected,
            "bad signatures": self.bad_signatures,
            "deliveries not delivered": self.deliveries_undelivered,
            "outbox rows left": sum(self.outbox_left.values()),
            "dead letters": self.dead_letters,
        }
        found = [f"{name}: {count}" for name, count in checks.items() if count]
        if self.refused:
            found.append(f"unexpected answers: {self.refused[:3]}")
        if self.accepted != self.intended:
            found.append(f"accepted {self.accepted} of {self.intended}")
        if not self.settled:
            found.append(f"did not settle within {self.settle_seconds:.0f} s")
        return found


# --- databases ---------------------------------------------------------------------------------------


def postgres_url() -> str:
    return postgres_admin_url()


@contextlib.contextmanager
def fresh_database(backend: str, work: Path) -> Iterator[str]:
    """An empty database of the kind: a SQLite file in `work`, or a PostgreSQL database dropped after."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{work / 'wagate.db'}"
        return
    admin = postgres_url().replace("postgresql+psycopg://", "postgresql://")
    name = "wagate_crash_" + secrets.token_hex(4)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    try:
        yield f"{postgres_url().rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


# --- the client --------------------------------------------------------------------------------------


class Client:
    """Sends `singles` single OTPs (each to its own number, with its own Idempotency-Key) and one batch
    of `batch` numbers, repeating a request whose answer was lost until it is answered."""

    def __init__(
        self,
        urls: Sequence[str],
        account_id: int,
        channel_id: int,
        *,
        singles: int,
        batch: int,
        rate: float,
        concurrency: int,
        batch_after: float,
        deadline_seconds: float = 300.0,
    ) -> None:
        self.urls = list(urls)
        self.account_id = account_id
        self.channel_id = channel_id
        self.numbers = [new_number() for _ in range(singles)]
        self.batch_numbers = [new_number() for _ in range(batch)]
        self.rate = rate
        self.concurrency = concurrency
        self.batch_after = batch_after  # the batch goes once this share of the singles is accepted
        self.deadline_seconds = deadline_seconds
        self.lock = threading.Lock()
        self.accepted: dict[str, str] = {}  # message id -> number
        self.batch_id: str | None = None
        self.batch_accepted = 0
        self.unanswered = 0
        self.retried = 0
        self.refused: list[str] = []
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="crash-client", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def accepted_count(self) -> int:
        with self.lock:
            return len(self.accepted) + self.batch_accepted

    def _post(self, http: httpx.Client, n: int, path: str, body: dict[str, Any], want: int) -> Any:
        """POST with one Idempotency-Key until the answer is `want`; None when it never was."""
        key = str(uuid.uuid4())
        deadline = time.monotonic() + self.deadline_seconds
        for attempt in itertools.count():
            url = self.urls[(n + attempt) % len(self.urls)]
            endpoint = f"{url}/v1/accounts/{self.account_id}{path}"
            try:
                response = http.post(endpoint, json=body, headers={**HEADERS, "Idempotency-Key": key})
            except httpx.TransportError:
                response = None
            if response is not None and response.status_code == want:
                return response.json()
            if response is not None and response.status_code < 500 and response.status_code != 409:
                with self.lock:
                    self.refused.append(f"{response.status_code} {response.text[:200]}")
                return None
            # Lost (the process died, or was down), a 5xx, or 409: the first try is still under way.
            with self.lock:
                self.retried += 1
            if time.monotonic() > deadline:
                with self.lock:
                    self.unanswered += 1
                return None
            time.sleep(0.1)
        return None

    def _singles(self, counter: Iterator[int], started: float) -> None:
        with httpx.Client(timeout=15.0) as http:
            while True:
                with self.lock:
                    n = next(counter)
                if n >= len(self.numbers):
                    return
                due = started + n / self.rate  # pacing the load, not waiting for an outcome
                if (pause := due - time.monotonic()) > 0:
                    time.sleep(pause)
                body = {
                    "channel_id": self.channel_id,
                    "phone_number": self.numbers[n],
                    "template": {"name": "otp_code", "language": "en", "parameters": [f"{n:06d}"]},
                }
                answer = self._post(http, n, "/whatsapp/messages", body, 201)
                if answer is not None:
                    with self.lock:
                        self.accepted[answer["id"]] = self.numbers[n]

    def _batch(self) -> None:
        if not self.batch_numbers:
            return
        while len(self.accepted) < self.batch_after * len(self.numbers) and not self.done.is_set():
            time.sleep(0.02)
        body = {
            "channel_id": self.channel_id,
            "template": {"name": "otp_code", "language": "en", "parameters": ["424242"]},
            "phone_numbers": self.batch_numbers,
        }
        with httpx.Client(timeout=30.0) as http:
            answer = self._post(http, 0, "/whatsapp/bulk_messages", body, 202)
        if answer is not None:
            with self.lock:
                self.batch_id = answer["batch_id"]
                self.batch_accepted = int(answer["accepted"])

    def _run(self) -> None:
        try:
            counter = itertools.count()
            started = time.monotonic()
            threads = [
                threading.Thread(target=self._singles, args=(counter, started), daemon=True)
                for _ in range(self.concurrency)
            ]
            threads.append(threading.Thread(target=self._batch, daemon=True))
            for thread in threads:
                thread.start()
            for thread in threads[:-1]:
                thread.join()
            self.done.set()  # the batch goes now at the latest
            threads[-1].join()
        finally:
            self.done.set()


# --- the processes -----------------------------------------------------------------------------------


class Cluster:
    """The scenario's processes on one database, and the simulator's webhooks pointed at the first API."""

    def __init__(self, scenario: Scenario, env: dict[str, str], work: Path, simulator: Simulator) -> None:
        self.scenario = scenario
        args = () if scenario.api_dispatches else ("--no-dispatcher",)
        self.apis = [
            GatewayProcess(env, free_port(), work, args=args, name=f"serve{n}") for n in range(scenario.api)
        ]
        self.workers = [WorkerProcess(env, work, name=f"worker{n}") for n in range(scenario.workers)]
        self.simulator = simulator

    @property
    def processes(self) -> list[ManagedProcess]:
        return [*self.apis, *self.workers]

    @property
    def victims(self) -> list[ManagedProcess]:
        if self.scenario.victims == "serve":
            return list(self.apis)
        if self.scenario.victims == "worker":
            return list(self.workers)
        return self.processes

    def urls(self) -> list[str]:
        return [api.url for api in self.apis]

    def start(self) -> None:
        self.simulator.configure(
            webhook_url=f"{self.apis[0].url}/webhooks/whatsapp",
            # The premise of the grace period: Meta retries a webhook more often than the grace lasts.
            webhook_retry_cap=GRACE_SECONDS / 2,
        )
        for process in self.processes:
            process.start()

    def stop(self) -> None:
        for process in self.processes:
            process.stop()

    def logs(self, lines: int = 40) -> str:
        return "\n".join(process.logs(lines) for process in self.processes)


def claim_holders(database_url: str) -> tuple[set[str], int, int]:
    """The pids holding claims now, the send rows in flight and the deliveries claimed."""
    rows = query(
        database_url,
        "SELECT kind, locked_by, count(*) FROM outbox WHERE kind IN ('send_message', 'deliver_event')"
        " AND locked_by IS NOT NULL AND (state = 'in_flight' OR kind = 'deliver_event')"
        " GROUP BY kind, locked_by",
    )
    pids = {str(locked_by).rsplit(":", 1)[-1] for _, locked_by, _ in rows}
    sends = sum(int(n) for kind, _, n in rows if kind == "send_message")
    events = sum(int(n) for kind, _, n in rows if kind == "deliver_event")
    return pids, sends, events


def pick_victim(
    cluster: Cluster, database_url: str, rng: random.Random, nth: int
) -> tuple[ManagedProcess, int, int]:
    """Mostly a victim that holds claims (sends or deliveries under way), sometimes any victim. With
    victims of both kinds, the kills take turns: a `serve`, then a `worker`."""
    victims = cluster.victims
    if cluster.scenario.victims == "any" and cluster.workers:
        victims = list(cluster.apis) if nth % 2 == 0 else list(cluster.workers)
    pids, sends, events = claim_holders(database_url)
    holding = [v for v in victims if str(v.pid()) in pids]
    if holding and rng.random() < 0.8:
        return rng.choice(holding), sends, events
    return rng.choice(victims), sends, events


def held_singles(database_url: str, pid: int | None) -> list[str]:
    """The single sends a process (by pid) holds claimed: right after its kill, the dead's."""
    if pid is None:
        return []
    sql = (
        "SELECT message_id, locked_by FROM outbox WHERE kind = 'send_message' AND priority = 0"
        " AND state IN ('in_flight', 'unconfirmed')"
    )
    return [str(m) for m, locked_by in query(database_url, sql) if str(locked_by).endswith(f":{pid}")]


def down_seconds(rng: random.Random) -> float:
    """Mostly an immediate restart; sometimes a short outage; sometimes one longer than a send's lease
    (after which a send claimed by the dead process is the new one's to settle, or to send again)."""
    roll = rng.random()
    if roll < 0.6:
        return 0.0
    if roll < 0.9:
        return round(rng.uniform(0.3, 3.0), 2)
    return round(rng.uniform(SEND_LEASE_SECONDS, SEND_LEASE_SECONDS + 3.0), 2)


# --- one run ---------------------------------------------------------------------------------------


def work_rows(database_url: str) -> dict[str, int]:
    kinds = ", ".join(f"'{k}'" for k in WORK_KINDS)
    sql = f"SELECT kind, state, count(*) FROM outbox WHERE kind IN ({kinds}) GROUP BY kind, state"  # noqa: S608
    rows = query(database_url, sql)
    return {f"{kind}/{state}": int(n) for kind, state, n in rows}


def as_list(value: Any) -> list[Any]:
    if isinstance(value, str):
        loaded: list[Any] = json.loads(value)
        return loaded
    return list(value)


def run_once(
    cluster: Cluster,
    database_url: str,
    simulator: Simulator,
    receiver: Receiver,
    receiver_path: str,
    secret: str,
    account_id: int,
    channel_id: int,
    phone_number_id: str,
    spec: RunSpec,
    rng: random.Random,
    *,
    scenario: str,
    run: int,
    log: Any = print,
) -> RunResult:
    """One client load with `spec.kills` SIGKILLs at random moments, settled and counted."""
    result = RunResult(scenario, run, intended=spec.messages)
    singles = spec.messages - spec.batch
    client = Client(
        cluster.urls(),
        account_id,
        channel_id,
        singles=singles,
        batch=spec.batch,
        rate=spec.single_rate,
        concurrency=spec.concurrency,
        batch_after=round(rng.uniform(0.05, 0.6), 2),
    )
    already_received = len(receiver.received(receiver_path))
    began = time.monotonic()
    # The run lasts about this long without kills; the kills are spread over it (and a little past it:
    # a kill may find the client done and the backlog, the statuses and the events still flowing).
    span = max(singles / spec.single_rate, spec.messages / spec.channel_rate)
    gap = 2.0 * span / max(spec.kills, 1)
    client.start()
    for _ in range(spec.kills):
        time.sleep(rng.uniform(0.1, gap))
        victim, sends, events = pick_victim(cluster, database_url, rng, len(result.kills))
        upstream = len(sim_sends(simulator, phone_number_id))
        down = down_seconds(rng)
        pid = victim.pid()
        victim.kill()
        held = held_singles(database_url, pid)
        kill = Kill(
            round(time.monotonic() - began, 2),
            victim.name,
            down,
            client.accepted_count(),
            upstream,
            sends,
            events,
            held_singles=held,
        )
        time.sleep(down)
        victim.start(timeout=60)
        kill.restart_seconds = round(victim.start_seconds, 2)
        result.kills.append(kill)
        log(
            f"  kill {len(result.kills)}/{spec.kills} at {kill.at:.1f} s: {kill.victim}"
            f" (accepted {kill.accepted}, upstream {kill.upstream}, sends in flight {sends},"
            f" events claimed {events}), down {down:.1f} s, restart {kill.restart_seconds:.1f} s"
        )
    client.join(timeout=client.deadline_seconds + 60)

    # Settle: nothing left to do anywhere, then count.
    settle_began = time.monotonic()
    while True:
        left = work_rows(database_url)
        batch_done = client.batch_id is None or bool(
            query(
                database_url,
                f"SELECT 1 FROM batches WHERE id = '{client.batch_id}' AND status = 'completed'",  # noqa: S608
            )
        )
        idle = simulator.http.get(f"{simulator.url}/_sim/idle", params={"seconds": 0}).json()["idle"]
        if not left and batch_done and idle:
            # The last webhooks may have come in just now: one more look once they are applied.
            time.sleep(1.0)
            if not work_rows(database_url):
                result.settled = True
                break
        if time.monotonic() - settle_began > spec.settle_timeout:
            break
        time.sleep(0.5)
    result.settle_seconds = round(time.monotonic() - settle_began, 1)
    result.seconds = round(time.monotonic() - began, 1)

    count(
        result,
        client,
        database_url,
        simulator,
        receiver,
        receiver_path,
        secret,
        channel_id,
        phone_number_id,
        already_received,
    )
    return result


def signature_ok(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """Standard Webhooks' `v1` signature, without its 5-minute timestamp tolerance: the events are
    checked after the run, which may take longer than that."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    given = [part.split(",", 1)[1] for part in headers["webhook-signature"].split() if part.startswith("v1,")]
    return any(hmac.compare_digest(expected, g) for g in given)


def count(
    result: RunResult,
    client: Client,
    database_url: str,
    simulator: Simulator,
    receiver: Receiver,
    receiver_path: str,
    secret: str,
    channel_id: int,
    phone_number_id: str,
    already_received: int,
) -> None:
    with client.lock:
        accepted = dict(client.accepted)
        result.batch_accepted = client.batch_accepted
        result.unanswered = client.unanswered
        result.retried = client.retried
        result.refused = list(client.refused)
        batch_id = client.batch_id
    columns = "id, phone_number, status, status_history, batch_id, external_error"
    rows = query(database_url, f"SELECT {columns} FROM messages WHERE channel_id = {int(channel_id)}")  # noqa: S608
    messages = {str(r[0]): r for r in rows}
    if batch_id is not None:
        for r in rows:
            if r[4] == batch_id:
                accepted[str(r[0])] = str(r[1])
    result.accepted = len(accepted)
    result.unaccepted_stored = len(set(messages) - set(accepted))

    entries = sim_sends(simulator, phone_number_id)
    by_id = Counter(str(e["biz_opaque_callback_data"]) for e in entries)
    by_number = Counter((e["to"] or "").lstrip("+") for e in entries)
    doubled = {m for m, n in by_id.items() if n > 1}
    doubled |= {m for m, number in accepted.items() if by_number[number.lstrip("+")] > 1}
    result.sent_twice = len(doubled)
    result.samples["sent_twice"] = sorted(doubled)[:5]
    lost, failed, not_delivered = [], [], []
    held = {message_id for kill in result.kills for message_id in kill.held_singles}
    for message_id in accepted:
        row = messages.get(message_id)
        status = row[2] if row is not None else None
        unconfirmed = str(row[5] if row else "").startswith("upstream_unconfirmed")
        if status == "failed" and unconfirmed and message_id in held and by_id[message_id] <= 1:
            result.unconfirmed += 1
        elif status == "failed":
            failed.append(f"{message_id} ({row[5] if row else ''})")
        elif by_id[message_id] == 0:
            lost.append(message_id)
        elif status not in ("delivered", "read"):
            not_delivered.append(f"{message_id} ({status})")
        if by_id[message_id] == 1:
            result.sent_once += 1
    result.lost, result.failed, result.not_delivered = len(lost), len(failed), len(not_delivered)
    result.samples.update(lost=lost[:5], failed=failed[:5], not_delivered=not_delivered[:5])

    # Events: what the messages' final states call for, against what the receiver got.
    expected: set[tuple[str, str, str]] = set()
    for message_id, row in messages.items():
        expected.add(("message_created", message_id, "sent"))
        for item in as_list(row[3])[1:]:
            expected.add(("message_updated", message_id, str(item["status"])))
    if batch_id is not None:
        expected.add(("batch_completed", batch_id, "completed"))
    received = receiver.received(receiver_path)[already_received:]
    ids_of: dict[tuple[str, str, str], set[str]] = {}
    seen_ids: Counter[str] = Counter()
    for item in received:
        if not signature_ok(secret, item.headers, item.body):
            result.bad_signatures += 1
        body = item.json
        event = str(body["event"])
        if event == "batch_completed":
            key = (event, str(body.get("batch_id") or body.get("batch", {}).get("batch_id")), "completed")
        else:
            key = (event, str(body["message"]["id"]), str(body["message"]["status"]))
        if key[1] not in messages and key[1] != batch_id:
            continue  # another run's message (a late repeat): not this run's business
        seen_ids[item.headers["webhook-id"]] += 1
        ids_of.setdefault(key, set()).add(item.headers["webhook-id"])
    result.events_expected = len(expected)
    result.events_delivered = len(expected & set(ids_of))
    missing = sorted(expected - set(ids_of))
    result.events_lost = len(missing)
    result.samples["events_lost"] = [" ".join(k) for k in missing[:5]]
    result.events_unexpected = len(set(ids_of) - expected)
    result.samples["events_unexpected"] = [" ".join(k) for k in sorted(set(ids_of) - expected)[:5]]
    result.events_doubled = sum(1 for ids in ids_of.values() if len(ids) > 1)
    result.event_repeats = sum(n - 1 for n in seen_ids.values())

    mine = f"m.channel_id = {int(channel_id)} OR d.message_id IS NULL"
    undelivered = query(
        database_url,
        "SELECT count(*) FROM deliveries d LEFT JOIN messages m ON m.id = d.message_id"  # noqa: S608
        f" WHERE d.state != 'delivered' AND ({mine})",
    )
    result.deliveries_undelivered = int(undelivered[0][0])
    result.outbox_left = work_rows(database_url)
    if result.outbox_left:
        kinds = ", ".join(f"'{k}'" for k in WORK_KINDS)
        sql = f"SELECT id, kind, state, attempts, locked_by, locked_until FROM outbox WHERE kind IN ({kinds})"  # noqa: S608
        result.samples["outbox_left"] = [" ".join(map(str, row)) for row in query(database_url, sql)[:10]]
    result.dead_letters = int(query(database_url, "SELECT count(*) FROM dead_letters")[0][0])
    stats = simulator.http.get(f"{simulator.url}/_sim/stats").json()
    result.sim_webhooks_given_up = int(stats.get("webhooks", {}).get("gave_up", 0))


# --- a scenario --------------------------------------------------------------------------------------


def spread(kills: int, runs: int) -> list[int]:
    """`kills` over `runs` runs, as evenly as they go (the first runs take the remainder)."""
    return [kills // runs + (1 if n < kills % runs else 0) for n in range(runs)]


def run_scenario(
    scenario: Scenario,
    runs: int,
    spec: RunSpec,
    seed: int,
    work: Path,
    *,
    kills: int | None = None,
    log: Any = print,
) -> list[RunResult]:
    """Fresh database, the simulator in its own process, provisioning with a channel per run, one
    account webhook for the message and batch events, then `runs` runs with `kills` SIGKILLs spread
    over them (default `spec.kills` each)."""
    per_run = spread(kills, runs) if kills is not None else [spec.kills] * runs
    work.mkdir(parents=True, exist_ok=True)
    receiver = Receiver()
    results: list[RunResult] = []
    try:
        with simulator_process(work) as simulator, fresh_database(scenario.backend, work) as database_url:
            channels = [
                register_channel(simulator, f"Crash{n}", spec.channel_rate, ["admin@acme.test"])
                for n in range(1, runs + 1)
            ]
            file = provision_file()
            file["accounts"][0]["channels"].extend(channels)
            provisioned = provision(database_url, simulator, work, file)
            env = gateway_env(database_url, simulator) | {
                "WAGATE_ALLOW_PRIVATE_URLS": "true",  # the receiver is on loopback
                "WAGATE_EVENT_RETRY_BASE_SECONDS": "1",
                # A delivery claimed by a killed process is posted again after this (the least allowed).
                "WAGATE_EVENT_LEASE_SECONDS": "15",
                "WAGATE_LOG_LEVEL": "warning",
            }
            cluster = Cluster(scenario, env, work, simulator)
            try:
                cluster.start()
                path = f"events-{scenario.name}"
                created = httpx.post(
                    f"{cluster.apis[0].url}/v1/accounts/{provisioned.account_id}/webhooks",
                    json={"url": receiver.url(path), "events": EVENTS},
                    headers=HEADERS,
                    timeout=30,
                )
                assert created.status_code == 201, created.text
                secret = created.json()["secret"]
                # Other processes see a new webhook when their cache of subscriptions expires: events of
                # changes they write before that are not for it (it did not exist for them yet).
                time.sleep(SUBSCRIPTIONS_CACHE_SECONDS + 0.5)
                for n, channel in enumerate(channels, start=1):
                    rng = random.Random(f"{seed}:{scenario.name}:{n}")
                    log(f"{scenario.name} run {n}/{runs} ({scenario.describe()})")
                    result = run_once(
                        cluster,
                        database_url,
                        simulator,
                        receiver,
                        path,
                        secret,
                        provisioned.account_id,
                        provisioned.channels[channel["name"]],
                        channel["phone_number_id"],
                        replace(spec, kills=per_run[n - 1]),
                        rng,
                        scenario=scenario.name,
                        run=n,
                        log=log,
                    )
                    results.append(result)
                    log(f"  {summary_line(result)}")
                    for problem in result.problems():
                        log(f"  PROBLEM {problem}; samples {result.samples}")
            except BaseException:
                log(cluster.logs())
                raise
            finally:
                cluster.stop()
    finally:
        receiver.stop()
    return results


# --- reporting ---------------------------------------------------------------------------------------

COLUMNS = (
    ("scenario", 18),
    ("run", 3),
    ("kills", 5),
    ("accepted", 8),
    ("once", 5),
    ("lost", 4),
    ("twice", 5),
    ("failed", 6),
    ("unconf", 6),
    ("undeliv", 7),
    ("ev.exp", 6),
    ("ev.got", 6),
    ("ev.lost", 7),
    ("ev.rep", 6),
    ("ev.dbl", 6),
    ("outbox", 6),
    ("retried", 7),
    ("secs", 5),
)


def row_of(r: RunResult) -> list[str]:
    return [
        r.scenario,
        str(r.run),
        str(len(r.kills)),
        str(r.accepted),
        str(r.sent_once),
        str(r.lost),
        str(r.sent_twice),
        str(r.failed),
        str(r.unconfirmed),
        str(r.not_delivered),
        str(r.events_expected),
        str(r.events_delivered),
        str(r.events_lost),
        str(r.event_repeats),
        str(r.events_doubled),
        str(sum(r.outbox_left.values())),
        str(r.retried),
        f"{r.seconds:.0f}",
    ]


def total_of(scenario: str, results: list[RunResult]) -> list[str]:
    def s(attr: str) -> int:
        return sum(int(getattr(r, attr)) for r in results)

    return [
        scenario,
        "all",
        str(sum(len(r.kills) for r in results)),
        str(s("accepted")),
        str(s("sent_once")),
        str(s("lost")),
        str(s("sent_twice")),
        str(s("failed")),
        str(s("unconfirmed")),
        str(s("not_delivered")),
        str(s("events_expected")),
        str(s("events_delivered")),
        str(s("events_lost")),
        str(s("event_repeats")),
        str(s("events_doubled")),
        str(sum(sum(r.outbox_left.values()) for r in results)),
        str(s("retried")),
        f"{sum(r.seconds for r in results):.0f}",
    ]


def table(results: list[RunResult], *, markdown: bool = False) -> str:
    rows = [row_of(r) for r in results]
    for scenario in dict.fromkeys(r.scenario for r in results):
        mine = [r for r in results if r.scenario == scenario]
        if len(mine) > 1:
            rows.append(total_of(scenario, mine))
    names = [name for name, _ in COLUMNS]
    if markdown:
        lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [
        max(width, len(name), *(len(row[i]) for row in rows)) for i, (name, width) in enumerate(COLUMNS)
    ]
    lines = ["  ".join(name.rjust(w) for name, w in zip(names, widths, strict=True))]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def summary_line(r: RunResult) -> str:
    return (
        f"accepted {r.accepted}/{r.intended} (batch {r.batch_accepted}), at the simulator once {r.sent_once},"
        f" lost {r.lost}, sent twice {r.sent_twice}, failed {r.failed}"
        f" (and {r.unconfirmed} held by a killed dispatcher, unconfirmed), not delivered {r.not_delivered};"
        f" events expected {r.events_expected}, delivered {r.events_delivered}, lost {r.events_lost},"
        f" repeats {r.event_repeats}, doubled {r.events_doubled}, unexpected {r.events_unexpected};"
        f" deliveries undelivered {r.deliveries_undelivered}; outbox left {r.outbox_left};"
        f" dead letters {r.dead_letters}; requests retried {r.retried}; settled {r.settled}"
        f" in {r.settle_seconds:.0f} s; run {r.seconds:.0f} s"
    )
