"""The real `wagate` command as a subprocess (migrate, provision, serve) against the session's simulator.

Shared by the tests that must run the gateway as an operator would, in a process of its own: the crash
tests (SIGKILL and restart) and the pacing tests (the gateway's timing must not share the test
process's GIL). The simulator stays in the test process (the session's `simulator` fixture), except
for the pacing tests, which run one in a process of its own (`simulator_process`).

The fixtures here are taken into a test module by assignment (`provisioned = gateway_process.provisioned`),
so pytest finds them there; a module may define its own `provisioned` instead (another provisioning file),
and `gateway_process` then uses that one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from cryptography.fernet import Fernet

from support.harness import (
    ADMIN_TOKEN,
    APP_SECRET,
    GLOBEX,
    MAIN,
    SECOND,
    VERIFY_TOKEN,
    Simulator,
    provision_file,
)

WAGATE = Path(sys.executable).with_name("wagate")
# One key for every process on a module's database: provisioning encrypts the channels' tokens with it.
SECRET_KEY = Fernet.generate_key().decode()
GRACE_SECONDS = 2
UPSTREAM_TIMEOUT_SECONDS = 3
DONE = {"sent", "delivered", "read"}


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
    channel_id: int  # Acme's Main channel
    database_url: str
    channels: dict[str, int] = field(default_factory=dict)  # Acme's channels by name


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
        WAGATE_UPSTREAM_TIMEOUT_SECONDS=str(UPSTREAM_TIMEOUT_SECONDS),
        PYTHONUNBUFFERED="1",
    )
    return env


def run_command(args: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        [str(WAGATE), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"wagate {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return done.stdout


def provision(
    database_url: str, simulator: Simulator, work: Path, spec: dict[str, Any] | None = None
) -> Provisioned:
    """`wagate migrate` and `wagate provision` (the given file, else the usual one), as an operator would."""
    env = gateway_env(database_url, simulator)
    run_command(["migrate"], env, work)
    path = work / "provision.json"
    path.write_text(json.dumps(spec or provision_file()))
    result = json.loads(run_command(["provision", str(path)], env, work))
    acme = next(a for a in result["accounts"] if a["name"] == "Acme")
    channels = {c["name"]: c["channel_id"] for c in acme["channels"]}
    tokens = {k["token"] for k in acme["api_keys"]}
    assert ADMIN_TOKEN in tokens
    return Provisioned(env, acme["account_id"], channels["Main"], database_url, channels)


@pytest.fixture(scope="module")
def provisioned(
    database_url: str, simulator: Simulator, tmp_path_factory: pytest.TempPathFactory
) -> Provisioned:
    """`wagate migrate` and `wagate provision` once per database, exactly as an operator would run them."""
    return provision(database_url, simulator, tmp_path_factory.mktemp("crash"))


class ManagedProcess:
    """A `wagate` command as a child process (the python process itself, no shell in between).

    Each start writes a log of its own (`<name>-<n>.log` in `log_dir`); `kill` is SIGKILL.
    """

    def __init__(self, env: dict[str, str], log_dir: Path, *, name: str) -> None:
        self.env = env
        self.log_dir = log_dir
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.kills = 0
        self.start_seconds = 0.0  # how long the last start took, until it was ready

    def command(self) -> list[str]:
        raise NotImplementedError

    def wait_ready(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        raise NotImplementedError

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}-{self.runs}.log"

    def logs(self, lines: int = 60) -> str:
        return "\n".join(
            f"--- {self.name} run {n} (last lines) ---\n{tail(self.log_dir / f'{self.name}-{n}.log', lines)}"
            for n in range(1, self.runs + 1)
        )

    def start(self, timeout: float = 30.0) -> None:
        assert self.pid() is None
        self.runs += 1
        began = time.monotonic()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(WAGATE), *self.command()],
                env=self.env,
                cwd=self.log_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.wait_ready(self.proc, timeout)
        self.start_seconds = time.monotonic() - began

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, whatever the process was doing is cut off where it stood."""
        assert self.proc is not None and self.pid() is not None, f"{self.name} died before the kill"
        # The entry point is a python script run directly, so this pid is the interpreter itself.
        cmdline = Path(f"/proc/{self.proc.pid}/cmdline").read_bytes().split(b"\0")
        assert any(b"python" in part for part in cmdline[:1]), cmdline
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.kills += 1

    def stop(self) -> None:
        if self.proc is None or self.pid() is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


class GatewayProcess(ManagedProcess):
    """`wagate serve` (with `args`, e.g. `--no-dispatcher`); ready when /healthz answers."""

    def __init__(
        self,
        env: dict[str, str],
        port: int,
        log_dir: Path,
        *,
        args: tuple[str, ...] = (),
        name: str = "gateway",
    ) -> None:
        super().__init__(env, log_dir, name=name)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.args = args

    def command(self) -> list[str]:
        return ["serve", "--host", "127.0.0.1", "--port", str(self.port), *self.args]

    def wait_ready(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        wait_ready(proc, f"{self.url}/healthz", timeout, self.logs)


class WorkerProcess(ManagedProcess):
    """`wagate worker`: the dispatcher alone. Given an `ops_port`, it serves its operator's listener
    there and is ready when its /readyz answers 200 (imports done, schema current, dispatcher running);
    without one it serves nothing, so "ready" is: still alive after `settle` seconds."""

    def __init__(
        self,
        env: dict[str, str],
        log_dir: Path,
        *,
        name: str = "worker",
        settle: float = 0.5,
        ops_port: int | None = None,
    ) -> None:
        super().__init__(env, log_dir, name=name)
        self.settle = settle
        self.ops_port = ops_port

    def command(self) -> list[str]:
        return ["worker"] if self.ops_port is None else ["worker", "--metrics-port", str(self.ops_port)]

    def wait_ready(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        if self.ops_port is not None:
            wait_ready(proc, f"http://127.0.0.1:{self.ops_port}/readyz", timeout, self.logs)
            return
        time.sleep(self.settle)
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args} exited with {proc.returncode}\n{self.logs()}")


def wait_ready(proc: subprocess.Popen[bytes], url: str, timeout: float, logs: Callable[[], str]) -> None:
    """Until `url` answers 200; fails with the process's logs if it exits or takes too long."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=1.0) as http:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"{proc.args} exited with {proc.returncode}\n{logs()}")
            with contextlib.suppress(httpx.TransportError):
                if http.get(url).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} not ready within {timeout} s\n{logs()}")
            time.sleep(0.05)


@contextlib.contextmanager
def simulator_process(log_dir: Path) -> Iterator[Simulator]:
    """`wagate simulator` in a process of its own, with the session simulator's channels.

    For tests that judge timing by the simulator's stamps: in the test process, its event loop shares
    the GIL with the test's own polling, and a stamp can come late by as long as that holds it.
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAGATE_")}
    env["WAGATE_LOG_LEVEL"] = "warning"  # no line per request
    log_path = log_dir / "simulator.log"
    args = [str(WAGATE), "simulator", "--port", str(port), "--app-secret", APP_SECRET]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, env=env, cwd=log_dir, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, f"{url}/_sim/config", 30.0, lambda: tail(log_path))
        with httpx.Client(timeout=10) as http:
            for channel in (MAIN, SECOND, GLOBEX):
                http.post(f"{url}/_sim/channels", json=channel).raise_for_status()
            yield Simulator(url, http)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def gateway_process(provisioned: Provisioned, tmp_path: Path) -> Iterator[GatewayProcess]:
    """Not started: a test starts it (after wiring the simulator to its url), kills and restarts it."""
    gateway = GatewayProcess(provisioned.env, free_port(), tmp_path)
    try:
        yield gateway
    finally:
        gateway.stop()


@contextlib.contextmanager
def simulator_wiring(simulator: Simulator) -> Iterator[Callable[[str], None]]:
    """Lets a test point the simulator's webhooks at its gateway; every switch flipped is put back after."""
    before = simulator.http.get(f"{simulator.url}/_sim/config").json()

    def wire(gateway_url: str) -> None:
        simulator.configure(
            webhook_url=f"{gateway_url}/webhooks/whatsapp",
            # The premise of the grace period, scaled to the tests' 2 s: Meta retries a webhook more
            # often than the grace lasts. With the simulator's usual retries up to 5 s apart, a gateway
            # killed and back within moments could judge a send orphaned before the retry of its
            # status came, and send it again (4 of 257 once in CI).
            webhook_retry_cap=GRACE_SECONDS / 2,
        )

    try:
        yield wire
    finally:
        simulator.configure(
            webhook_url=before["webhook_url"],
            status_delays=before["status_delays"],
            slow_response_seconds=before["slow_response_seconds"],
            response_latency_seconds=before["response_latency_seconds"],
            webhook_retry_cap=before["webhook_retry_cap"],
            rate_limit_per_second=before["rate_limit_per_second"],
            fail_next={"count": 0, "code": 0},
        )


@pytest.fixture
def wired_simulator(simulator: Simulator) -> Iterator[Callable[[str], None]]:
    """Points the simulator's webhooks at our gateway; every switch a test flips is put back afterwards."""
    with simulator_wiring(simulator) as wire:
        yield wire


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


def register_channel(simulator: Simulator, name: str, rate: int, members: list[str]) -> dict[str, Any]:
    """A channel of Acme's with a phone number id of its own, registered at the simulator.

    Its own number keeps the simulator's log for it short (a query for it is cheap, and what other
    tests sent on the shared numbers never gets in the way). Returns its provisioning entry.
    """
    suffix = f"{int.from_bytes(os.urandom(4), 'big') % 10**8:08d}"
    ids = {
        "phone_number_id": f"1065{suffix}",
        "waba_id": f"1022{suffix}",
        "display_phone_number": f"1555{suffix[:7]}",
    }
    simulator.http.post(f"{simulator.url}/_sim/channels", json=ids).raise_for_status()
    return {
        "name": name,
        "phone_number": "+" + ids["display_phone_number"],
        "phone_number_id": ids["phone_number_id"],
        "waba_id": ids["waba_id"],
        "access_token": f"EAAG-test-{name}",
        "members": members,
        "messages_per_second": rate,
    }


def sim_sends(simulator: Simulator, phone_number_id: str) -> list[dict[str, Any]]:
    """The simulator's accepted sends from one phone number id, oldest first."""
    response = simulator.http.get(
        f"{simulator.url}/_sim/messages", params={"phone_number_id": phone_number_id}
    )
    response.raise_for_status()
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def max_in_window(times: list[float], window: float = 1.0) -> int:
    """The most of `times` in any half-open window [t, t + window)."""
    times = sorted(times)
    best, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best
