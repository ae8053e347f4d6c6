"""The database restarted under a running gateway (issue 14, point 2): PostgreSQL is stopped
(`pg_ctl stop -m fast`) in the middle of a stream of sends and started again.

While it is down every request gets 503 `not_ready` with Retry-After, quickly: never a 500, never a
hang. Once it is back, without restarting the gateway, every message that got a 201 reaches Meta
(the simulator) exactly once and ends delivered, its events reach the account's webhook, new sends are
accepted again and /readyz is 200.

The PostgreSQL here is a private one in a temporary directory on a port of its own, never the
machine's cluster (others use it): the binaries of the installed server (/usr/lib/postgresql/*/bin),
run as the `postgres` OS user when the test runs as root (initdb refuses root). Without them, or
without WAGATE_TEST_POSTGRES_URL (the sign that PostgreSQL tests are wanted), the test is skipped.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.app_in_thread import running_gateway, sql
from support.gateway_process import GatewayProcess, WorkerProcess, free_port, provision, simulator_wiring
from support.harness import ADMIN_TOKEN, Gateway, Simulator, new_number, wait_for
from support.receiver import Receiver

pytestmark = pytest.mark.timeout(300)

OTP = {"name": "otp_code", "language": "en", "parameters": ["777777"]}
# No request may take longer than this while the database is down (the gateway answers at once when
# its connection attempt is refused).
MOST_SECONDS = 8.0
OUTAGE_SECONDS = 4.0


def _postgres_bin() -> Path | None:
    def version(path: str) -> tuple[int, ...]:
        found = re.search(r"/postgresql/([\d.]+)/", path)
        return tuple(int(p) for p in found.group(1).split(".")) if found else (0,)

    found = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: version(str(p)),
    )
    return found[-1] if found else None


class PrivatePostgres:
    """A throwaway PostgreSQL cluster: initdb in a temp dir, its socket there too, on a free port."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="wagate-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.root, user="postgres", group="postgres")
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 60) -> None:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            log = self.root / "postgres.log"
            raise RuntimeError(
                f"{' '.join(args[:2])} failed: {done.stdout}{done.stderr}"
                + (log.read_text()[-3000:] if log.exists() else "")
            )

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "postgres.log"),
            "-o",
            options,
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    if not os.environ.get("WAGATE_TEST_POSTGRES_URL"):
        pytest.skip("PostgreSQL only: set WAGATE_TEST_POSTGRES_URL to run the PostgreSQL tests")
    bindir = _postgres_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin to run a private cluster")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: cannot run initdb as the postgres user")
    cluster = PrivatePostgres(bindir)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


@dataclass
class Attempt:
    started: float  # time.monotonic()
    elapsed: float
    status: int | None  # None: no answer at all (a transport error)
    body: dict[str, Any]
    retry_after: str | None
    error: str | None = None


class Stream(threading.Thread):
    """Posts OTPs one after another, from `workers` threads, until stopped; records every answer."""

    def __init__(self, gateway: Gateway, workers: int = 3) -> None:
        super().__init__(daemon=True)
        self.gateway = gateway
        self.workers = workers
        self.attempts: list[Attempt] = []
        self.lock = threading.Lock()
        self.done = threading.Event()

    def run(self) -> None:
        threads = [threading.Thread(target=self._post_loop, daemon=True) for _ in range(self.workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _post_loop(self) -> None:
        url = self.gateway.v1("/whatsapp/messages")
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        with httpx.Client(timeout=30) as http:
            while not self.done.is_set():
                body = {"channel_id": self.gateway.ids["main"], "phone_number": new_number(), "template": OTP}
                started = time.monotonic()
                try:
                    response = http.post(url, json=body, headers=headers)
                    attempt = Attempt(
                        started,
                        time.monotonic() - started,
                        response.status_code,
                        _json(response),
                        response.headers.get("retry-after"),
                    )
                except httpx.HTTPError as exc:
                    attempt = Attempt(started, time.monotonic() - started, None, {}, None, repr(exc))
                with self.lock:
                    self.attempts.append(attempt)
                time.sleep(0.02)

    def accepted(self) -> list[Attempt]:
        with self.lock:
            return [a for a in self.attempts if a.status == 201]

    def stop(self) -> list[Attempt]:
        self.done.set()
        self.join(60)
        with self.lock:
            return list(self.attempts)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        value = response.json()
    except ValueError:
        return {"raw": response.text[:200]}
    return value if isinstance(value, dict) else {"raw": value}


def exercise_restart(
    cluster: PrivatePostgres, gateway: Gateway, receiver: Receiver, simulator: Simulator
) -> str:
    """Posts a stream of sends, stops the database mid-run and starts it again, and checks what the
    module's docstring says; returns the counts, for the report."""
    hook = gateway.http.post(
        gateway.v1("/webhooks"), json={"url": receiver.url("events")}, headers=gateway.headers()
    )
    assert hook.status_code == 201, hook.text
    stream = Stream(gateway)
    stream.start()
    wait_for(lambda: len(stream.accepted()) >= 20, timeout=30, what="20 sends accepted before the stop")

    cluster.stop("fast")
    down_at = time.monotonic()
    during: list[httpx.Response] = []
    while time.monotonic() - down_at < OUTAGE_SECONDS:
        during.append(gateway.http.get(f"{gateway.url}/readyz"))
        time.sleep(0.5)
    up_at = time.monotonic()
    cluster.start()

    before_up = len(stream.accepted())
    wait_for(
        lambda: len(stream.accepted()) >= before_up + 20,
        timeout=60,
        interval=0.1,
        what="20 sends accepted after the database came back",
    )
    attempts = stream.stop()

    # During the outage: 503 not_ready with Retry-After, quickly; never a 500, never a hang.
    assert all(r.status_code == 503 for r in during), [r.status_code for r in during]
    assert all(r.json()["error"]["code"] == "not_ready" for r in during)
    others = [a for a in attempts if a.status not in (201, 503)]
    # A reset here is a 503 that closed the client's keep-alive connection: the outage's handler
    # must answer without re-raising to the server (which logs and closes the connection).
    assert not others, f"answers other than 201 and 503: {others[:5]}"
    refused = [a for a in attempts if a.status == 503]
    in_outage = [a for a in attempts if down_at + 0.5 <= a.started and a.started + a.elapsed <= up_at]
    assert in_outage and all(a.status == 503 for a in in_outage), [
        (a.status, a.body) for a in in_outage if a.status != 503
    ][:5]
    for attempt in refused:
        assert attempt.body["error"]["code"] == "not_ready", attempt.body
        assert attempt.retry_after is not None and int(attempt.retry_after) >= 1
    slowest = max(a.elapsed for a in attempts)
    assert slowest < MOST_SECONDS, f"a request took {slowest:.1f} s"

    # After it: every accepted message went to Meta once and was delivered, without a restart.
    accepted = [str(a.body["id"]) for a in attempts if a.status == 201]

    def all_delivered() -> bool:
        marks = ", ".join(f"'{m}'" for m in accepted)  # our own ids: msg_ and base32
        rows = sql(cluster.url, f"SELECT status FROM messages WHERE id IN ({marks})")  # noqa: S608
        return len(rows) == len(accepted) and all(r[0] == "delivered" for r in rows)

    try:
        wait_for(all_delivered, timeout=60, interval=0.3, what="every accepted message to be delivered")
    except AssertionError:
        marks = ", ".join(f"'{m}'" for m in accepted)
        columns = "m.id, m.status, m.external_error, o.state, o.attempts, o.locked_until, o.last_error"
        stuck = sql(
            cluster.url,
            f"SELECT {columns} FROM messages m LEFT JOIN outbox o ON o.message_id = m.id"  # noqa: S608
            f" WHERE m.id IN ({marks}) AND m.status <> 'delivered'",
        )
        jobs = sql(cluster.url, "SELECT kind, state, attempts, locked_until, run_at, last_error FROM outbox")
        raise AssertionError(f"not delivered: {len(stuck)}: {stuck[:8]}; outbox: {jobs}") from None
    sent = [e["biz_opaque_callback_data"] for e in simulator.messages()]
    counts = {m: sent.count(m) for m in accepted}
    assert all(n == 1 for n in counts.values()), {m: n for m, n in counts.items() if n != 1}

    def events_in() -> bool:
        got = {
            r.json["message"]["id"]
            for r in receiver.received("events")
            if r.json.get("message", {}).get("status") == "delivered"
        }
        return set(accepted) <= got

    wait_for(events_in, timeout=60, interval=0.3, what="a delivered event for every accepted message")
    assert gateway.http.get(f"{gateway.url}/readyz").status_code == 200
    left = sql(cluster.url, "SELECT count(*) FROM outbox WHERE kind = 'send_message'")[0][0]
    assert left == 0
    return (
        f"{len(attempts)} requests, {len(accepted)} accepted (201), "
        f"{len(refused)} refused 503 not_ready ({len(in_outage)} wholly inside the "
        f"{up_at - down_at:.1f} s outage), 0 other answers, slowest {slowest:.2f} s; "
        f"{len(accepted)} delivered, each sent once; {len(accepted)} delivered events"
    )


def test_a_database_restart_mid_run_loses_nothing_and_needs_no_gateway_restart(
    private_postgres: PrivatePostgres, simulator: Simulator
) -> None:
    receiver = Receiver()
    settings = {"allow_private_urls": True, "event_retry_base_seconds": 1.0}
    try:
        with running_gateway(private_postgres.url, simulator, **settings) as gateway:
            summary = exercise_restart(private_postgres, gateway, receiver, simulator)
        print(f"\ndatabase restart (serve in the test's process): {summary}")
    finally:
        receiver.stop()


def test_a_database_restart_under_an_api_process_and_a_worker(
    private_postgres: PrivatePostgres, simulator: Simulator, tmp_path: Path
) -> None:
    """The same with `wagate serve --no-dispatcher` and `wagate worker` as processes of their own: the
    worker takes its channel's lock again and hears the API's NOTIFY again; neither is restarted."""
    provisioned = provision(private_postgres.url, simulator, tmp_path)
    env = {**provisioned.env, "WAGATE_ALLOW_PRIVATE_URLS": "true", "WAGATE_EVENT_RETRY_BASE_SECONDS": "1"}
    api = GatewayProcess(env, free_port(), tmp_path, args=("--no-dispatcher",), name="api")
    worker = WorkerProcess(env, tmp_path)
    receiver = Receiver()
    try:
        with simulator_wiring(simulator) as wire, httpx.Client(timeout=30) as http:
            api.start()
            worker.start()
            wire(api.url)
            pids = (api.pid(), worker.pid())
            ids = {"acme": provisioned.account_id, "main": provisioned.channel_id}
            gateway = Gateway(api.url, http, simulator, private_postgres.url, ids)
            summary = exercise_restart(private_postgres, gateway, receiver, simulator)
            assert (api.pid(), worker.pid()) == pids, (
                f"a process died or was restarted\n{api.logs()}\n{worker.logs()}"
            )
        print(f"\ndatabase restart (an API process and a worker): {summary}")
    finally:
        api.stop()
        worker.stop()
        receiver.stop()
