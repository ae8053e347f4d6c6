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

import contextlib
import itertools
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from cryptography.fernet import Fernet

from support import (
    ADMIN_TOKEN,
    APP_SECRET,
    MAIN,
    VERIFY_TOKEN,
    Simulator,
    new_number,
    provision_file,
    wait_for,
)

WAGATE = Path(sys.executable).with_name("wagate")
# One key for every process on the module's database: provisioning encrypts the channels' tokens with it.
SECRET_KEY = Fernet.generate_key().decode()
GRACE_SECONDS = 2
DONE = {"sent", "delivered", "read"}

pytestmark = pytest.mark.timeout(180)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 60) -> str:
    if not path.exists():
        return f"({path.name} does not exist)"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


@dataclass
class Provisioned:
    env: dict[str, str]
    account_id: int
    channel_id: int
    database_url: str


def gateway_env(database_url: str, simulator: Simulator) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAGATE_")}
    env.update(
        WAGATE_DATABASE_URL=database_url,
        WAGATE_GRAPH_API_URL=simulator.graph_url,
        WAGATE_META_APP_SECRET=APP_SECRET,
        WAGATE_META_VERIFY_TOKEN=VERIFY_TOKEN,
        WAGATE_SECRET_KEY=SECRET_KEY,
        WAGATE_UNCONFIRMED_SEND_GRACE_SECONDS=str(GRACE_SECONDS),
        # A send's lease is this plus the grace: a call cut off by the kill is settled or resent 5 s on.
        WAGATE_UPSTREAM_TIMEOUT_SECONDS="3",
        PYTHONUNBUFFERED="1",
    )
    return env


def run_command(args: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        [str(WAGATE), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"wagate {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def provisioned(
    database_url: str, simulator: Simulator, tmp_path_factory: pytest.TempPathFactory
) -> Provisioned:
    """`wagate migrate` and `wagate provision` once per database, exactly as an operator would run them."""
    work = tmp_path_factory.mktemp("crash")
    env = gateway_env(database_url, simulator)
    run_command(["migrate"], env, work)
    spec = work / "provision.json"
    spec.write_text(json.dumps(provision_file()))
    result = json.loads(run_command(["provision", str(spec)], env, work))
    acme = next(a for a in result["accounts"] if a["name"] == "Acme")
    main = next(c for c in acme["channels"] if c["name"] == "Main")
    tokens = {k["token"] for k in acme["api_keys"]}
    assert ADMIN_TOKEN in tokens
    return Provisioned(env, acme["account_id"], main["channel_id"], database_url)


class GatewayProcess:
    """`wagate serve` as a child process (the python process itself, no shell in between)."""

    def __init__(self, env: dict[str, str], port: int, log_dir: Path) -> None:
        self.env = env
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.start_seconds = 0.0  # how long the last start took, until /healthz answered

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"gateway-{self.runs}.log"

    def logs(self) -> str:
        return "\n".join(
            f"--- gateway run {n} (last lines) ---\n{tail(self.log_dir / f'gateway-{n}.log')}"
            for n in range(1, self.runs + 1)
        )

    def start(self, timeout: float = 30.0) -> None:
        assert self.pid() is None
        self.runs += 1
        began = time.monotonic()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(WAGATE), "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                env=self.env,
                cwd=self.log_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=1.0) as http:
            while True:
                if self.proc.poll() is not None:
                    raise AssertionError(f"wagate serve exited with {self.proc.returncode}\n{self.logs()}")
                with contextlib.suppress(httpx.TransportError):
                    if http.get(f"{self.url}/healthz").status_code == 200:
                        self.start_seconds = time.monotonic() - began
                        return
                if time.monotonic() > deadline:
                    raise AssertionError(f"wagate serve not ready within {timeout} s\n{self.logs()}")
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, whatever the process was doing is cut off where it stood."""
        assert self.proc is not None and self.pid() is not None, "the gateway died before the kill"
        # The entry point is a python script run directly, so this pid is the interpreter itself.
        cmdline = Path(f"/proc/{self.proc.pid}/cmdline").read_bytes().split(b"\0")
        assert any(b"python" in part for part in cmdline[:1]), cmdline
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.pid() is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


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


def query(database_url: str, sql: str) -> list[tuple[Any, ...]]:
    """Read the gateway's database directly (the process may be dead), for checks and diagnostics."""
    if database_url.startswith("sqlite"):
        conn = sqlite3.connect(database_url.split("///", 1)[1], timeout=10)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()
    with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://")) as pg:
        return pg.execute(sql).fetchall()  # type: ignore[arg-type]


def outbox_sends(database_url: str) -> Counter[str]:
    """The send rows left in the outbox, by state."""
    sql = "SELECT state, count(*) FROM outbox WHERE kind = 'send_message' GROUP BY state"
    rows = query(database_url, sql)
    return Counter({str(state): int(count) for state, count in rows})


def diagnostics(database_url: str) -> str:
    return f"outbox send rows {dict(outbox_sends(database_url))}"


def sim_entries(simulator: Simulator, numbers: set[str]) -> list[dict[str, Any]]:
    """The simulator's accepted sends on the Main number to any of `numbers`."""
    digits = {n.lstrip("+") for n in numbers}
    response = simulator.http.get(
        f"{simulator.url}/_sim/messages", params={"phone_number_id": MAIN["phone_number_id"]}
    )
    response.raise_for_status()
    return [e for e in response.json()["data"] if e["to"].lstrip("+") in digits]


@pytest.fixture
def wired_simulator(simulator: Simulator) -> Iterator[Callable[[str], None]]:
    """Points the simulator's webhooks at our gateway; every switch a test flips is put back afterwards."""
    before = simulator.http.get(f"{simulator.url}/_sim/config").json()

    def wire(gateway_url: str) -> None:
        simulator.configure(webhook_url=f"{gateway_url}/webhooks/whatsapp")

    yield wire
    simulator.configure(
        webhook_url=before["webhook_url"],
        status_delays=before["status_delays"],
        slow_response_seconds=before["slow_response_seconds"],
        webhook_retry_cap=before["webhook_retry_cap"],
        fail_next={"count": 0, "code": 0},
    )


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
    per_number = Counter(e["to"].lstrip("+") for e in entries)
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
        assert entry["to"].lstrip("+") == number.lstrip("+")

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


@pytest.fixture
def gateway_process(provisioned: Provisioned, tmp_path: Path) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess(provisioned.env, free_port(), tmp_path)
    try:
        yield gateway
    finally:
        gateway.stop()


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
    """A burst is accepted; SIGKILL while a round of upstream calls is under way and more wait behind it.

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
        # The premise of the grace period: Meta retries a webhook more often than the grace lasts. With
        # retries up to 5 s apart and a 2 s grace, a retry could come after the resend.
        webhook_retry_cap=GRACE_SECONDS / 2,
    )
    gateway.start()
    log = SendLog()
    try:
        send_many(gateway.url, provisioned, log, total=150, rate=None, concurrency=8)
        assert log.accepted_count() == 150, (log.connection_errors, log.other[:3])
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
