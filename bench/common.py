"""The harness every benchmark shares: child processes, readiness waits, percentiles, /proc figures (RSS,
CPU), a throwaway PostgreSQL database, waiting for a quiet machine, a slower machine (a CPU quota),
py-spy profiles, the options the benchmarks have in common, and their log and JSON output.

Neighbours: loadgen.py (closed- and open-loop HTTP load), stack.py (a whole gateway: simulator,
migrate, provision, serve; and the bare endpoint). bench/ is not a package: scripts run as
`python bench/x.py`, so Python puts bench/ first on sys.path and `from common import ...` works.

Everything listens on 127.0.0.1 only. Every wait is bounded in time, every loop in count or time, and
every process and directory made here is removed by the context manager or `stop()` that made it.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime
import json
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
PYTHON = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")
CPU_COUNT = os.cpu_count() or 1


def wagate_command() -> list[str]:
    """The `wagate` console script of the interpreter running the bench (the venv's)."""
    beside = Path(PYTHON).parent / "wagate"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("wagate")
    if found is None:
        raise RuntimeError("no `wagate` command beside the interpreter or on PATH; pip install -e . first")
    return [found]


# --------------------------------------------------------------------------- numbers


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_summary_ms(seconds: list[float]) -> dict[str, float | int]:
    """p50 / p90 / p99 / max / mean of latencies given in seconds, in milliseconds."""
    if not seconds:
        return {"count": 0, "p50_ms": math.nan, "p90_ms": math.nan, "p99_ms": math.nan, "max_ms": math.nan}
    ms = sorted(s * 1000.0 for s in seconds)
    return {
        "count": len(ms),
        "p50_ms": round(percentile(ms, 50), 3),
        "p90_ms": round(percentile(ms, 90), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "max_ms": round(ms[-1], 3),
        "mean_ms": round(sum(ms) / len(ms), 3),
    }


# --------------------------------------------------------------------------- ports and processes


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


class ManagedProcess:
    """A child process whose output goes to a log file; `stop()` terminates it (then kills) and waits."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        log_dir: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("wb")
        try:
            self.popen = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        except BaseException:
            self._log.close()
            raise

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
        try:
            if self.alive:
                self.popen.send_signal(signal.SIGTERM)
                try:
                    self.popen.wait(timeout)
                except subprocess.TimeoutExpired:
                    print(
                        f"{self.name} did not stop within {timeout} s of SIGTERM; killing it", file=sys.stderr
                    )
                    self.popen.kill()
                    self.popen.wait(5.0)
            return self.popen.returncode
        finally:
            self._log.close()


def run_command(
    argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120.0
) -> str:
    """Run to completion; returns stdout; raises with both streams when it fails."""
    done = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited with {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    return done.stdout


def http_json(
    method: str, url: str, body: Any = None, *, timeout: float = 30.0, headers: dict[str, str] | None = None
) -> Any:
    """A small synchronous JSON call (set-up and control endpoints; never the measured path)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 - loopback URLs only
        url, data=data, method=method, headers=headers or {}
    )
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        raw = response.read()
    return json.loads(raw) if raw else None


def wait_http_ok(url: str, *, timeout: float = 30.0, process: ManagedProcess | None = None) -> float:
    """Poll `url` until it answers 2xx; returns the seconds it took. Fails early if `process` dies."""
    start = time.monotonic()
    deadline = start + timeout
    last_error = ""
    while time.monotonic() < deadline:
        if process is not None and not process.alive:
            raise RuntimeError(
                f"{process.name} exited with {process.popen.returncode} before {url} answered:\n"
                + process.tail()
            )
        try:
            with urllib.request.urlopen(url, timeout=2.0) as response:  # noqa: S310 - loopback
                if 200 <= response.status < 300:
                    return time.monotonic() - start
        except (urllib.error.URLError, OSError) as exc:
            last_error = repr(exc)
        time.sleep(0.05)
    tail = f"\n{process.tail()}" if process is not None else ""
    raise RuntimeError(f"{url} did not answer within {timeout} s ({last_error}){tail}")


def fernet_key() -> str:
    """A fresh WAGATE_SECRET_KEY (channel access tokens are encrypted with it)."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


def sigterm_as_interrupt() -> Callable[[], bool]:
    """Handle SIGTERM as Ctrl+C, so the same finally blocks stop the servers and drop the database.

    The handler does not raise by itself: an exception raised from a signal handler can land in a
    protocol callback, where the event loop swallows it. SIGINT is handled safely everywhere:
    asyncio.run() cancels its main task, and plain code gets KeyboardInterrupt. Returns a function
    that tells whether SIGTERM was received.
    """
    received: list[bool] = []

    def handler(_signum: int, _frame: Any) -> None:
        received.append(True)
        os.kill(os.getpid(), signal.SIGINT)

    signal.signal(signal.SIGTERM, handler)
    return lambda: bool(received)


# --------------------------------------------------------------------------- /proc figures


def proc_status_kb(pid: int, key: str) -> int | None:
    """A `kB` line of /proc/<pid>/status (VmHWM: the peak RSS over the process's life)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_rss_mb(pid: int) -> float | None:
    kb = proc_status_kb(pid, "VmHWM")
    return None if kb is None else round(kb / 1024, 1)


def proc_cpu_seconds(pid: int, *, thread: int | None = None) -> float | None:
    """User + system CPU seconds of one process (its threads included), from /proc/<pid>/stat; with
    `thread`, of that thread alone (/proc/<pid>/task/<thread>/stat)."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        with open(path) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the ")": state is field 3 of the man page, so utime (14) and stime (15) are at 11 and 12.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from the first line of /proc/stat."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already inside user
    return total - idle, total


@dataclass
class CpuSnapshot:
    wall: float
    machine: tuple[int, int]
    own: float  # this process (the load generator)
    procs: dict[int, float]
    # Each process's main thread: in `wagate serve` and `wagate worker` the event loop, whose share
    # tells the request's and the dispatcher's CPU from the writer threads' (the units of work).
    main_threads: dict[int, float] = field(default_factory=dict)


def cpu_snapshot(pids: Iterable[int]) -> CpuSnapshot:
    procs = {}
    main_threads = {}
    for pid in pids:
        value = proc_cpu_seconds(pid)
        if value is not None:
            procs[pid] = value
        main = proc_cpu_seconds(pid, thread=pid)
        if main is not None:
            main_threads[pid] = main
    times = os.times()
    return CpuSnapshot(
        time.monotonic(), machine_cpu_jiffies(), times.user + times.system, procs, main_threads
    )


def cpu_usage(before: CpuSnapshot, after: CpuSnapshot, groups: dict[str, Iterable[int]]) -> dict[str, float]:
    """CPU used between two snapshots, in % of ONE core per group (100 = one core busy all the time),
    and of the group's main threads (`<group>_main_pct`: the event loops of `serve` and `worker`).

    `machine_busy_pct` is of all cores (100 = every core busy); `other_pct` is what the machine did
    beyond the groups and the load generator, in % of one core (other people's work, the kernel...).
    A pid that appeared between the snapshots counts from zero.
    """
    wall = max(after.wall - before.wall, 1e-9)
    result: dict[str, float] = {"client_pct": round(100 * (after.own - before.own) / wall, 1)}
    ours = after.own - before.own
    for name, pids in groups.items():
        used = main = 0.0
        for pid in set(pids):
            if pid in after.procs:
                used += after.procs[pid] - before.procs.get(pid, 0.0)
            if pid in after.main_threads:
                main += after.main_threads[pid] - before.main_threads.get(pid, 0.0)
        ours += used
        result[f"{name}_pct"] = round(100 * used / wall, 1)
        result[f"{name}_main_pct"] = round(100 * main / wall, 1)
    busy = after.machine[0] - before.machine[0]
    total = max(after.machine[1] - before.machine[1], 1)
    result["machine_busy_pct"] = round(100 * busy / total, 1)
    machine_core_seconds = busy / CLK_TCK
    result["other_pct"] = round(max(0.0, 100 * (machine_core_seconds - ours) / wall), 1)
    return result


# --------------------------------------------------------------------------- PostgreSQL

POSTGRES_ADMIN_URL = os.environ.get(
    "WAGATE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def postgres_available(admin_url: str = POSTGRES_ADMIN_URL) -> bool:
    """True when PostgreSQL answers at the admin URL and lets us in."""
    import psycopg

    try:
        with psycopg.connect(_plain(admin_url), connect_timeout=2):
            return True
    except psycopg.Error:
        return False


@contextlib.contextmanager
def throwaway_postgres_database(
    prefix: str = "wagate_bench_", admin_url: str = POSTGRES_ADMIN_URL
) -> Iterator[tuple[str, str]]:
    """Create `<prefix><random>`; yields (SQLAlchemy URL, database name); drops it afterwards."""
    import psycopg

    name = prefix + secrets.token_hex(4)
    admin = _plain(admin_url)
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        base = admin.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
        yield f"{base}/{name}", name
    finally:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def analyze_postgres(database: str, admin_url: str = POSTGRES_ADMIN_URL) -> None:
    """`ANALYZE` the bench database: give PostgreSQL's planner the statistics of tables that grew from
    empty in seconds, as autovacuum does within its first minute in a running deployment. Without
    them it plans for empty tables, and keeps those plans for the statements psycopg prepared
    (ANALYZE invalidates them): a send's result set its wamid by reading every message (a sequential
    scan), a status batch compared every contact with the whole list. Measured in
    docs/decisions/0004-outbox-claims.md."""
    import psycopg

    with psycopg.connect(_plain(admin_url).rsplit("/", 1)[0] + f"/{database}", autocommit=True) as conn:
        conn.execute("ANALYZE")


def postgres_backend_pids(database: str, admin_url: str = POSTGRES_ADMIN_URL) -> list[int]:
    """Server processes serving connections to `database` right now (for CPU accounting)."""
    import psycopg

    try:
        with psycopg.connect(_plain(admin_url), autocommit=True, connect_timeout=2) as conn:
            rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)).fetchall()
    except psycopg.Error:
        return []
    return [int(r[0]) for r in rows]


@contextlib.contextmanager
def database_for(database: str) -> Iterator[tuple[str | None, str | None] | None]:
    """Where a run on `database` keeps its data: for "sqlite" (None, None), the gateway's stack makes a
    file of its own; for "postgresql" a throwaway database's (SQLAlchemy URL, name), dropped afterwards,
    or None (logged) when PostgreSQL does not answer."""
    if database == "sqlite":
        yield None, None
    elif not postgres_available():
        log("postgresql: nothing answers at 127.0.0.1:5432 as user postgres; skipped")
        yield None
    else:
        with throwaway_postgres_database() as (url, name):
            log(f"postgresql: throwaway database {name}")
            yield url, name


# --------------------------------------------------------------------------- a quiet machine


def wait_for_quiet(
    own_pids: Iterable[int], *, threshold_pct: float = 25.0, timeout: float = 60.0, window: float = 1.0
) -> dict[str, float]:
    """Wait until the rest of the machine uses less than `threshold_pct` of one core over `window` s.

    Other people's work on a 2-core machine moves every figure; this waits it out, up to `timeout`,
    and reports how busy the rest of the machine was in the last window and how long it waited.
    """
    pids = list(own_pids)
    start = time.monotonic()
    other = math.nan
    for _ in range(int(timeout / window) + 1):
        before = cpu_snapshot(pids)
        time.sleep(window)
        after = cpu_snapshot(pids)
        other = cpu_usage(before, after, {"own": pids})["other_pct"]
        if other < threshold_pct or time.monotonic() - start >= timeout:
            break
    return {"other_pct": other, "waited_s": round(time.monotonic() - start, 1)}


def quiet_machine(pids: Iterable[int], *, wait: float, threshold: float) -> dict[str, float]:
    """`wait_for_quiet` as the benchmarks call it before a measured phase (`--quiet-wait 0`: not at all);
    says so when the machine stayed busy, and the figures are then a lower bound."""
    if wait <= 0:
        return {"other_pct": math.nan, "waited_s": 0.0}
    state = wait_for_quiet(pids, threshold_pct=threshold, timeout=wait)
    if state["other_pct"] >= threshold:
        log(f"  the machine is not quiet: others use {state['other_pct']} % of a core; measuring anyway")
    return state


# --------------------------------------------------------------------------- a slower machine


CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
CGROUP_V2 = Path("/sys/fs/cgroup")


def limit_cpu(pids: list[int], cores: float | None, period_us: int = 10_000) -> None:
    """Run `pids` (with all their threads) on at most `cores` of CPU time from now on, as on a slower
    machine; the limit ends with the processes (the cgroup is removed when this program exits).

    A cgroup with a CFS quota of `cores` x `period_us` per `period_us` (cgroup v1's cpu controller, or
    v2's `cpu.max`; root only). The short period keeps each stall short: a process over its quota
    waits for the rest of the 10 ms period, not of the default 100 ms. A quota caps the time, not the
    speed: a process whose two threads are busy at once shares the quota between them, which a slower
    core would not make it do, so this is the harsher of the two. None: no limit.
    """
    if cores is None:
        return
    quota = f"{round(cores * period_us)}"
    if (CGROUP_V1_CPU / "cpu.cfs_quota_us").exists():
        group, root = CGROUP_V1_CPU / f"wagate-bench-{os.getpid()}", CGROUP_V1_CPU
        group.mkdir(exist_ok=True)
        (group / "cpu.cfs_period_us").write_text(str(period_us))
        (group / "cpu.cfs_quota_us").write_text(quota)
    elif "cpu" in (CGROUP_V2 / "cgroup.controllers").read_text().split():
        group, root = CGROUP_V2 / f"wagate-bench-{os.getpid()}", CGROUP_V2
        group.mkdir(exist_ok=True)
        (group / "cpu.max").write_text(f"{quota} {period_us}")
    else:
        raise RuntimeError("no cgroup cpu controller here: --cpu-quota needs cgroup v1 cpu or v2 cpu.max")
    for pid in pids:
        (group / "cgroup.procs").write_text(str(pid))

    def remove() -> None:
        with contextlib.suppress(OSError):
            for pid in (group / "cgroup.procs").read_text().split():
                (root / "cgroup.procs").write_text(pid)  # still running: back to no limit
            group.rmdir()

    atexit.register(remove)


# --------------------------------------------------------------------------- profiling (optional)


def py_spy_command() -> str | None:
    """py-spy beside the interpreter or on PATH (`pip install py-spy`; not a project dependency)."""
    beside = Path(PYTHON).parent / "py-spy"
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


@contextlib.contextmanager
def py_spy(pid: int, directory: Path | None, name: str, seconds: float) -> Iterator[None]:
    """With `--py-spy DIR`, sample `pid` while the block runs (at most `seconds`) into DIR/<name>.txt,
    py-spy's raw collapsed stacks of the thread holding the GIL, for bench/layers.py. Without, nothing."""
    if directory is None:
        yield
        return
    command = py_spy_command()
    if command is None:
        raise RuntimeError("py-spy is not installed (pip install py-spy into the venv)")
    directory.mkdir(parents=True, exist_ok=True)
    argv = [command, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
    argv += ["--rate", "250", "--format", "raw", "--output", str(directory / f"{name}.txt")]
    argv += ["--nonblocking", "--gil"]  # only the thread holding the GIL: where the Python time goes
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        if spy.poll() is None:
            spy.send_signal(signal.SIGINT)  # the measured part is over; py-spy writes what it sampled
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait(5)


def no_nan(value: Any) -> Any:
    """NaN is not JSON: missing figures are written as null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: no_nan(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [no_nan(v) for v in value]
    return value


def utc_stamp() -> str:
    """Now, in UTC, to the second, for a report's date."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def cpu_ms_per(pct: float | None, per_second: float | None) -> float | None:
    """CPU milliseconds per unit of work from a group's % of one core and units a second: steadier than
    the rate itself on a busy machine."""
    if pct is None or not per_second:
        return None
    return round(pct * 10 / per_second, 3)


# --------------------------------------------------------------------------- options and output


DATABASES = ("sqlite", "postgresql")


def add_databases_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--databases",
        default=",".join(DATABASES),
        help="comma-separated; postgresql is skipped when 127.0.0.1:5432 does not answer",
    )


def databases_of(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """The value of `--databases`, checked, in the order given."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in DATABASES:
            parser.error(f"unknown database {name!r} (choose from {', '.join(DATABASES)})")
    return names


def add_quiet_options(parser: argparse.ArgumentParser, wait: float) -> None:
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=wait,
        help="before each measured phase, wait up to this many seconds for other work on the machine to stop",
    )
    parser.add_argument(
        "--quiet-threshold", type=float, default=25.0, help="'quiet': others use < this %% of one core"
    )


def add_cpu_quota_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--cpu-quota",
        type=float,
        default=None,
        metavar="CORES",
        help=f"run {what} on at most this much CPU (a slower machine; root; see common.limit_cpu)",
    )


def add_py_spy_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"sample `wagate serve` with py-spy (GIL holder) {what}; stacks to DIR, for bench/layers.py",
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this file")


def write_json(path: Path | None, results: Any) -> None:
    if path is None:
        return
    path.write_text(json.dumps(no_nan(results), indent=2, default=str) + "\n")
    log(f"wrote {path}")


def log(message: str) -> None:
    """Progress, on stderr with the time; the report itself goes to stdout."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def fmt(value: Any, digits: int = 1) -> str:
    """A figure for a report's table: '-' when it is missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)
