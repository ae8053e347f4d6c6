"""Every target of DESIGN.md ("Targets") in one table, on SQLite and PostgreSQL, from one run.

The benchmarks that measure each target run here as subprocesses, each writing its figures with
`--json`; this script only reads those files, judges them and prints one table:

    bench/send_path.py --quick --no-statuses   accepted/s vs the bare endpoint (the simulator sends no
        --rounds 3                             status webhooks: the isolated figure; three closed loops,
                                               each between two of the bare endpoint, the median's
                                               ratio), p99 at 64 connections, accept -> upstream at
                                               100 msg/s, peak RSS
    bench/bulk.py --no-single                  a batch of 1000 at channel limits 80/s and 1000/s
    bench/statuses.py --messages 1000          Meta status webhooks applied per second
    bench/statuses.py --split-worker           the same on PostgreSQL with a `wagate worker` beside
                                               `serve --no-dispatcher` (what one more process adds)
    bench/events_delivery.py --events 5000     outgoing events delivered per second

plus "whole messages per second", what a user plans capacity by: 1000 / (server CPU ms per accepted
send + 3 x server CPU ms per applied status + server CPU ms per delivered event).

Each waits up to --quiet-wait seconds (15) for the rest of the machine to go quiet before each
measured phase; the table says how busy it still was. A target that is not met is a finding (exit 0);
a benchmark that fails (lost or duplicated messages, a crash, no figures) exits 1 after the table,
with the tail of its stderr.

    .venv/bin/python bench/targets.py [--only send,bulk,statuses,statuses-worker,events]
        [--databases sqlite,postgresql] [--json out.json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from common import (
    BENCH_DIR,
    CPU_COUNT,
    DATABASES,
    REPO_DIR,
    log,
    postgres_available,
    utc_stamp,
    write_json,
)

BENCHES = ("send", "bulk", "statuses", "statuses-worker", "events")
TITLE = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}

# DESIGN.md, "Targets".
RATIO_TO_BARE = {"sqlite": 0.25, "postgresql": 0.30}
P99_AT_64_MS = 50.0  # PostgreSQL's
A2U_RATE = 100.0  # send_path.py's open loop
A2U_P50_MS = 5.0
A2U_P99_MS = 25.0
BULK_RATES = (80, 1000)
BULK_SHARE_PCT = 98.0
STATUSES_PER_SECOND = 3000.0
EVENTS_PER_SECOND = 1000.0
RSS_MB = 300.0
STATUSES_PER_MESSAGE = 3  # sent, delivered, read

STDERR_TAIL = 40


class Settings(argparse.Namespace):
    only: list[str]
    databases: list[str]
    json: Path | None
    keep: Path | None
    messages: int
    events: int
    quiet_wait: float
    timeout: float


def _names(text: str, allowed: tuple[str, ...], what: str, parser: argparse.ArgumentParser) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    for name in names:
        if name not in allowed:
            parser.error(f"unknown {what} {name!r} (choose from {', '.join(allowed)})")
    if not names:
        parser.error(f"no {what} given")
    return [name for name in allowed if name in names]


def parse_args(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        description="DESIGN.md's targets in one table (runs the other benchmarks).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated benchmarks to run")
    parser.add_argument(
        "--databases",
        default=",".join(DATABASES),
        help="comma-separated; postgresql is skipped when 127.0.0.1:5432 does not answer",
    )
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this file")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep each benchmark's JSON, stdout, stderr here",
    )
    parser.add_argument("--messages", type=int, default=1000, help="statuses.py --messages (3 statuses each)")
    parser.add_argument("--events", type=int, default=5000, help="events_delivery.py --events")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=15.0,
        help="passed to every benchmark: the longest wait for a quiet machine before each measured phase "
        "(their own defaults, 30-60 s over some 13 phases, would double the run on a busy machine)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="longest run of one benchmark, seconds")
    settings = parser.parse_args(argv, namespace=Settings())
    settings.only = _names(str(settings.only), BENCHES, "benchmark", parser)
    settings.databases = _names(str(settings.databases), DATABASES, "database", parser)
    if settings.messages < 1 or settings.events < 2:
        parser.error("--messages must be at least 1 and --events at least 2")
    return settings


# --------------------------------------------------------------------------- running the benchmarks


@dataclass
class BenchRun:
    name: str
    command: list[str]
    exit_code: int | None = None
    seconds: float = 0.0
    error: str | None = None  # why it failed: exit code, timeout, no figures
    figures: dict[str, Any] | None = None
    stderr_tail: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.error is not None


def bench_command(name: str, settings: Settings, json_path: Path) -> list[str]:
    databases = ",".join(settings.databases)
    if name == "send":
        args = ["send_path.py", "--quick", "--no-statuses", "--rounds", "3"]
    elif name == "bulk":
        args = ["bulk.py", "--rates", ",".join(str(rate) for rate in BULK_RATES), "--no-single"]
    elif name == "statuses":
        args = ["statuses.py", "--messages", str(settings.messages)]
    elif name == "statuses-worker":
        args = ["statuses.py", "--split-worker", "--messages", str(settings.messages)]
        databases = "postgresql"
    else:
        args = ["events_delivery.py", "--events", str(settings.events)]
    args += ["--databases", databases, "--quiet-wait", f"{settings.quiet_wait:g}"]
    return [sys.executable, str(BENCH_DIR / args[0]), *args[1:], "--json", str(json_path)]


def _relay(stream: IO[str], name: str, tail: collections.deque[str], copy: IO[str]) -> None:
    """The benchmark's stderr, line by line: to ours (progress), to a file, and its last lines kept."""
    for line in stream:
        copy.write(line)
        tail.append(line.rstrip("\n"))
        sys.stderr.write(f"  {name}| {line}")
        sys.stderr.flush()


def run_bench(name: str, settings: Settings, workdir: Path, terminated: Callable[[], bool]) -> BenchRun:
    json_path = workdir / f"{name}.json"
    json_path.unlink(missing_ok=True)
    run = BenchRun(name, bench_command(name, settings, json_path))
    log(f"{name}: {' '.join(Path(part).name if i < 2 else part for i, part in enumerate(run.command))}")
    tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
    start = time.monotonic()
    with (
        open(workdir / f"{name}.out", "w") as out,
        open(workdir / f"{name}.err", "w") as err,
        subprocess.Popen(run.command, stdout=out, stderr=subprocess.PIPE, text=True, cwd=REPO_DIR) as process,
    ):
        assert process.stderr is not None
        relay = threading.Thread(target=_relay, args=(process.stderr, name, tail, err), daemon=True)
        relay.start()
        try:
            run.exit_code = process.wait(timeout=settings.timeout)
        except subprocess.TimeoutExpired:
            run.error = f"still running after {settings.timeout:g} s; stopped"
            _stop(process)
        except KeyboardInterrupt:
            # Ctrl+C reached the benchmark too (same process group): let it clean up first. SIGTERM
            # reached only this process: pass it on (the benchmarks treat it as Ctrl+C).
            _stop(process, grace=0.0 if terminated() else 60.0)
            raise
        finally:
            relay.join(timeout=10)
    run.seconds = round(time.monotonic() - start, 1)
    run.stderr_tail = list(tail)
    if run.error is None and run.exit_code != 0:
        run.error = f"exit code {run.exit_code}"
    if json_path.exists():
        try:
            run.figures = json.loads(json_path.read_text())
        except ValueError as exc:
            run.error = run.error or f"its JSON does not parse: {exc}"
    elif run.error is None:
        run.error = "it wrote no JSON"
    log(f"{name}: done in {run.seconds:g} s" + (f" ({run.error})" if run.error else ""))
    return run


def _stop(process: subprocess.Popen[str], grace: float = 0.0) -> None:
    """Wait `grace` seconds for the benchmark to end, then SIGTERM it (it stops its servers and drops
    its database), then SIGKILL."""
    try:
        process.wait(timeout=grace)
        return
    except subprocess.TimeoutExpired:
        pass
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


# --------------------------------------------------------------------------- the table


@dataclass
class Cell:
    figure: float | None = None
    shown: str = "-"
    ratio: float | None = None
    met: bool | None = None
    why: str | None = None  # why the figure is missing, or why it is not judged


@dataclass
class Row:
    target: str
    wanted: str
    cells: dict[str, Cell]
    judged: bool = True  # False: a figure without a target (its ratio and met are '-')


Getter = Callable[[str], tuple[float | None, str | None]]  # database -> (figure, why it is missing)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(value) else float(value)


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


class Figures:
    """The benchmarks' JSON, by benchmark and database, and why a figure is missing."""

    def __init__(self, settings: Settings, runs: dict[str, BenchRun], postgres_up: bool) -> None:
        self.settings = settings
        self.runs = runs
        self.postgres_up = postgres_up

    def database_absent(self, database: str) -> str | None:
        """Why nothing at all was measured on `database`, if so."""
        if database not in self.settings.databases:
            return f"{TITLE[database]} not asked for (--databases)"
        if database == "postgresql" and not self.postgres_up:
            return "127.0.0.1:5432 did not answer as user postgres"
        return None

    def absent(self, bench: str, database: str) -> str:
        """Why `bench` has nothing for `database`."""
        whole = self.database_absent(database)
        if whole is not None:
            return whole
        run = self.runs.get(bench)
        if run is None:
            return f"{bench} not run (--only)"
        if run.figures is None:
            return f"{Path(run.command[1]).name} failed ({run.error})"
        return f"{Path(run.command[1]).name} reported no {TITLE[database]} figures"

    def send(self, database: str) -> dict[str, Any] | None:
        run = self.runs.get("send")
        found = _dig(run.figures if run else None, "gateways", database)
        return found if isinstance(found, dict) else None

    def bare_per_second(self) -> float | None:
        run = self.runs.get("send")
        return _num(_dig(run.figures if run else None, "bare", "ok_per_second"))

    def bulk(self, database: str, rate: int) -> list[dict[str, Any]]:
        run = self.runs.get("bulk")
        runs = _dig(run.figures if run else None, "runs") or []
        return [r for r in runs if r.get("backend") == database and r.get("rate") == rate]

    def statuses(self, database: str, *, with_worker: bool = False) -> dict[str, Any] | None:
        run = self.runs.get("statuses-worker" if with_worker else "statuses")
        backend = f"{database} (serve + worker)" if with_worker else database
        for result in _dig(run.figures if run else None, "results") or []:
            if result.get("backend") == backend:
                return dict(result)
        return None

    def events(self, database: str) -> dict[str, Any] | None:
        run = self.runs.get("events")
        found = _dig(run.figures if run else None, "backends", database)
        return found if isinstance(found, dict) else None


def _ratio_text(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.0f}" if ratio >= 100 else f"{ratio:.3g}"


def judged_row(
    target: str,
    wanted: str,
    databases: tuple[str, ...],
    get: Getter,
    show: Callable[[float], str],
    met: Callable[[str, float], bool | None],
    ratio: Callable[[str, float], float | None],
    not_judged: Callable[[str], str | None] = lambda _db: None,
) -> Row:
    cells: dict[str, Cell] = {}
    for database in databases:
        value, why = get(database)
        if value is None:
            cells[database] = Cell(why=why or "no figure")
            continue
        reason = not_judged(database)
        cells[database] = Cell(
            figure=value,
            shown=show(value),
            ratio=ratio(database, value),
            met=None if reason else met(database, value),
            why=reason or why,
        )
    return Row(target, wanted, cells)


def less_than(bound: float) -> Callable[[str, float], bool | None]:
    return lambda _db, value: value < bound


def at_most(bound: float) -> Callable[[str, float], bool | None]:
    return lambda _db, value: value <= bound


def at_least(bound: float) -> Callable[[str, float], bool | None]:
    return lambda _db, value: value >= bound


def rate_text(value: float) -> str:
    return f"{value:.0f}/s"


def ms_text(value: float) -> str:
    return f"{value:.1f} ms"


def build_rows(figures: Figures) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    bare = figures.bare_per_second()

    def bare_for(database: str) -> float | None:
        """The bare endpoint's rate around this database's closed loop (send_path.py measures it right
        before and right after), else its one measurement of the run."""
        around = _num(_dig(figures.send(database), "closed_loop", "bare_around", "ok_per_second"))
        return around or bare

    def from_send(*keys: str) -> Getter:
        def get(database: str) -> tuple[float | None, str | None]:
            gateway = figures.send(database)
            if gateway is None:
                return None, figures.absent("send", database)
            value = _num(_dig(gateway, *keys))
            return value, None if value is not None else f"send_path.py has no {'.'.join(keys)}"

        return get

    def to_target(bound: float) -> Callable[[str, float], float | None]:
        return lambda _db, value: value / bound

    rows.append(
        judged_row(
            "accepted sends/s, 64 connections",
            "SQLite >= 0.25, PG >= 0.30 x bare",
            DATABASES,
            from_send("closed_loop", "ok_per_second"),
            rate_text,
            met=lambda db, value: (
                (denominator := bare_for(db)) is not None and value / denominator >= RATIO_TO_BARE[db]
            ),
            ratio=lambda db, value: value / denominator if (denominator := bare_for(db)) else None,
        )
    )
    rows.append(
        judged_row(
            "accept p99 at 64 connections",
            f"< {P99_AT_64_MS:g} ms (PostgreSQL)",
            DATABASES,
            from_send("closed_loop", "latency_ok", "p99_ms"),
            ms_text,
            met=less_than(P99_AT_64_MS),
            ratio=to_target(P99_AT_64_MS),
            not_judged=lambda db: "DESIGN.md sets this for PostgreSQL only" if db == "sqlite" else None,
        )
    )

    for quantile, bound in (("p50", A2U_P50_MS), ("p99", A2U_P99_MS)):
        rows.append(
            judged_row(
                f"accept->upstream {quantile} at {A2U_RATE:g} msg/s",
                f"< {bound:g} ms",
                DATABASES,
                from_send("open_loop", "accept_to_upstream", "from_request_start", f"{quantile}_ms"),
                ms_text,
                met=less_than(bound),
                ratio=to_target(bound),
            )
        )

    for rate in BULK_RATES:

        def from_bulk(key: str, worst: Callable[[list[float]], float], rate: int = rate) -> Getter:
            def get(database: str) -> tuple[float | None, str | None]:
                runs = figures.bulk(database, rate)
                if not runs:
                    return None, figures.absent("bulk", database)
                values = [v for v in (_num(_dig(r, "spacing", key)) for r in runs) if v is not None]
                if not values:
                    return None, f"bulk.py has no spacing.{key} at {rate}/s (too few sends arrived)"
                return worst(values), None

            return get

        rows.append(
            judged_row(
                f"bulk of 1000 at {rate}/s: share of limit",
                f">= {BULK_SHARE_PCT:g} % of {rate}/s",
                DATABASES,
                from_bulk("pct_of_limit", min),
                lambda value: f"{value:.2f} %",
                met=at_least(BULK_SHARE_PCT),
                ratio=to_target(BULK_SHARE_PCT),
            )
        )
        rows.append(
            judged_row(
                f"bulk of 1000 at {rate}/s: most in any 1 s",
                f"<= {rate}",
                DATABASES,
                from_bulk("max_in_any_1s_window", max),
                lambda value: f"{value:.0f}",
                met=at_most(rate),
                ratio=to_target(float(rate)),
            )
        )

    def from_statuses(database: str, with_worker: bool = False) -> tuple[float | None, str | None]:
        if with_worker and database == "sqlite":
            return None, "SQLite runs as one process (DESIGN.md)"
        result = figures.statuses(database, with_worker=with_worker)
        if result is None:
            return None, figures.absent("statuses-worker" if with_worker else "statuses", database)
        value = _num(result.get("applied_per_second"))
        if value is not None and not result.get("all_applied"):
            return value, "not every status was applied within 120 s"
        return value, None

    def statuses_met(database: str, value: float, with_worker: bool = False) -> bool:
        result = figures.statuses(database, with_worker=with_worker) or {}
        return value >= STATUSES_PER_SECOND and bool(result.get("all_applied"))

    rows.append(
        judged_row(
            "Meta status webhooks applied/s",
            f">= {STATUSES_PER_SECOND:g}/s",
            DATABASES,
            from_statuses,
            rate_text,
            met=statuses_met,
            ratio=to_target(STATUSES_PER_SECOND),
        )
    )
    # Issue 18 point 3: what one more process adds on PostgreSQL (DESIGN.md's layout at scale).
    rows.append(
        judged_row(
            "  the same, serve + worker [p]",
            f">= {STATUSES_PER_SECOND:g}/s (PostgreSQL)",
            DATABASES,
            lambda database: from_statuses(database, with_worker=True),
            rate_text,
            met=lambda database, value: statuses_met(database, value, with_worker=True),
            ratio=to_target(STATUSES_PER_SECOND),
        )
    )

    def from_events(database: str) -> tuple[float | None, str | None]:
        result = figures.events(database)
        if result is None:
            return None, figures.absent("events", database)
        value = _num(_dig(result, "rates", "per_second"))
        if value is None:
            return None, "events_delivery.py has no rates.per_second (too few events arrived)"
        if not result.get("complete"):
            return value, "not every event arrived"
        return value, None

    rows.append(
        judged_row(
            "outgoing events delivered/s",
            f">= {EVENTS_PER_SECOND:g}/s",
            DATABASES,
            from_events,
            rate_text,
            met=at_least(EVENTS_PER_SECOND),
            ratio=to_target(EVENTS_PER_SECOND),
        )
    )

    rss_sources: dict[str, str] = {}

    def from_rss(database: str) -> tuple[float | None, str | None]:
        found: list[tuple[float, str]] = []
        gateway = figures.send(database)
        if (value := _num(_dig(gateway, "peak_rss_mb"))) is not None:
            found.append((value, "send_path"))
        for rate in BULK_RATES:
            for run in figures.bulk(database, rate):
                if (value := _num(run.get("peak_rss_mb"))) is not None:
                    found.append((value, f"bulk at {rate}/s"))
        if (value := _num(_dig(figures.events(database), "peak_rss_mb"))) is not None:
            found.append((value, "events_delivery"))
        if not found:
            return None, "; ".join(
                dict.fromkeys(figures.absent(bench, database) for bench in ("send", "bulk", "events"))
            )
        value, source = max(found)
        rss_sources[database] = source + (f" (the highest of {len(found)})" if len(found) > 1 else "")
        return value, None

    rows.append(
        judged_row(
            "peak RSS of wagate serve",
            f"< {RSS_MB:g} MB",
            DATABASES,
            from_rss,
            lambda value: f"{value:.0f} MB",
            met=less_than(RSS_MB),
            ratio=to_target(RSS_MB),
        )
    )

    whole = whole_messages(figures)
    cells = {}
    for database in DATABASES:
        entry = whole[database]
        value = _num(entry.get("per_second"))
        cells[database] = (
            Cell(figure=value, shown=rate_text(value), why=entry.get("why"))
            if value is not None
            else Cell(why=entry.get("why"))
        )
    rows.append(Row("whole messages/s (server CPU) [w]", "(for capacity; no target)", cells, judged=False))
    return rows, {"whole_messages": whole, "rss_sources": rss_sources}


def whole_messages(figures: Figures) -> dict[str, dict[str, Any]]:
    """1000 / (CPU ms per accepted send + 3 x per applied status + per delivered event), per database."""
    out: dict[str, dict[str, Any]] = {}
    for database in DATABASES:
        gateway = figures.send(database)
        statuses = figures.statuses(database)
        events = figures.events(database)
        send_ms = _num(_dig(gateway, "closed_loop", "server_cpu_ms_per_ok"))
        status_ms = _num(_dig(statuses, "server_cpu_ms_per_status"))
        event_ms = _per_event_ms(events, "server_pct")
        entry: dict[str, Any] = {
            "send_ms": send_ms,
            "status_ms": status_ms,
            "event_ms": event_ms,
            "db_send_ms": _num(_dig(gateway, "closed_loop", "postgres_cpu_ms_per_ok")),
            "db_status_ms": _num(_dig(statuses, "postgres_cpu_ms_per_status")),
            "db_event_ms": _per_event_ms(events, "postgres_pct"),
        }
        missing = []
        if (whole := figures.database_absent(database)) is not None:
            missing.append(whole)
        elif send_ms is None:
            missing.append(f"CPU per send: {figures.absent('send', database)}")
        if status_ms is None and whole is None:
            missing.append(f"CPU per status: {figures.absent('statuses', database)}")
        if missing:
            entry["why"] = "; ".join(missing)
            out[database] = entry
            continue
        assert send_ms is not None and status_ms is not None
        total = send_ms + STATUSES_PER_MESSAGE * status_ms + (event_ms or 0.0)
        entry["ms_per_message"] = round(total, 3)
        entry["per_second"] = round(1000 / total, 1) if total > 0 else None
        if event_ms is None:
            entry["why"] = f"without events (CPU per event: {figures.absent('events', database)})"
        db_parts = (entry["db_send_ms"], entry["db_status_ms"], entry["db_event_ms"])
        if database == "postgresql" and all(part is not None for part in db_parts) and event_ms is not None:
            with_db = total + db_parts[0] + STATUSES_PER_MESSAGE * db_parts[1] + db_parts[2]
            entry["ms_per_message_with_postgres"] = round(with_db, 3)
            entry["per_second_with_postgres"] = round(1000 / with_db, 1)
        out[database] = entry
    return out


def _per_event_ms(events: dict[str, Any] | None, key: str) -> float | None:
    """CPU ms per delivered event: the group's % of one core while the backlog arrived / events per second
    (the same derivation as send_path.py's CPU ms per accepted send)."""
    pct = _num(_dig(events, "cpu", key))
    rate = _num(_dig(events, "rates", "per_second"))
    if pct is None or not rate:
        return None
    return round(pct * 10 / rate, 3)


# --------------------------------------------------------------------------- the report


def _met_text(row: Row, cell: Cell) -> str:
    if cell.figure is None or not row.judged:
        return "-"
    return {True: "yes", False: "NO", None: "n/a"}[cell.met]


def table(rows: list[Row]) -> list[str]:
    header = ["target", "wanted"]
    for database in DATABASES:
        header += [f"{TITLE[database]} figure", "ratio", "met"]
    body = []
    for row in rows:
        line = [row.target, row.wanted]
        for database in DATABASES:
            cell = row.cells[database]
            line += [cell.shown, _ratio_text(cell.ratio), _met_text(row, cell)]
        body.append(line)
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    left = {0, 1}

    def render(line: list[str]) -> str:
        return "  ".join(
            text.ljust(widths[i]) if i in left else text.rjust(widths[i]) for i, text in enumerate(line)
        ).rstrip()

    return [render(header), render(["-" * w for w in widths]), *(render(line) for line in body)]


def git_commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO_DIR, capture_output=True, text=True, timeout=30)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "src", "bench").splitlines()
    if changed:
        commit += f" + uncommitted changes in {len(changed)} files of src/ and bench/"
    return commit


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def around_text(figures: Figures) -> str:
    parts = []
    for database in DATABASES:
        around = _dig(figures.send(database), "closed_loop", "bare_around")
        if isinstance(around, dict) and around.get("ok_per_second"):
            before, after = around["before_ok_per_second"], around["after_ok_per_second"]
            rounds = _dig(figures.send(database), "closed_loop", "rounds") or []
            ratios = ", ".join(f"{r['ratio_to_bare']:.3f}" for r in rounds if isinstance(r, dict))
            each = f" (the rounds' ratios: {ratios})" if len(rounds) > 1 else ""
            parts.append(f"{TITLE[database]} {before:.0f} and {after:.0f}/s{each}")
    return ";\n  ".join(parts) if parts else "not measured"


def report(
    settings: Settings, figures: Figures, rows: list[Row], extra: dict[str, Any], header: dict[str, Any]
) -> str:
    bare = figures.bare_per_second()
    send_settings = _dig(figures.runs["send"].figures, "settings") if "send" in figures.runs else None
    postgres_state = "answered" if figures.postgres_up else "did not answer"
    if "postgresql" not in settings.databases:
        postgres_state = "not asked for"
    lines = [
        "",
        f"wagate: DESIGN.md targets, commit {header['commit']}, {header['date']}, {CPU_COUNT} CPUs, "
        f"bare endpoint {rate_text(bare) if bare else '- (send not run)'}"
        + (f" at {send_settings['concurrency']} connections" if send_settings else ""),
        f"run: {', '.join(settings.only)} on {', '.join(TITLE[d] for d in settings.databases)}; "
        f"PostgreSQL at 127.0.0.1:5432 {postgres_state}; "
        f"each waited up to {settings.quiet_wait:g} s for a quiet machine per phase; "
        f"took {header['duration_s'] / 60:.1f} min",
        "",
        *table(rows),
        "",
        "ratio: the figure over the target (for '<' and '<=' targets below 1 is met); on the accepted",
        "  sends/s row, the gateway's accepted/s over the bare endpoint's req/s around that closed loop",
        "  (the mean of a closed loop of the bare endpoint right before it and one right after it):",
        "  " + around_text(figures) + ".",
        "How each benchmark takes its figure: bench/targets.py's docstring and docs/performance.md.",
        "[p] statuses.py --split-worker: PostgreSQL's statuses with `wagate serve --no-dispatcher`",
        "  receiving and a `wagate worker` applying; the row above is one `wagate serve`.",
        "peak RSS: the highest VmHWM of the `wagate serve` processes that send_path, bulk and",
        "  events_delivery started (statuses.py does not report it): "
        + (
            "; ".join(f"{TITLE[d]} from {s}" for d, s in extra["rss_sources"].items())
            if extra["rss_sources"]
            else "-"
        )
        + ".",
    ]
    lines += whole_footnote(extra["whole_messages"])
    lines += load_notes(figures)
    notes = missing_notes(rows)
    if notes:
        lines += ["", "why a cell is '-' or 'n/a':", *notes]
    return "\n".join(lines)


def whole_footnote(whole: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "[w] whole messages/s = 1000 / (server CPU ms per accepted send + 3 x server CPU ms per applied",
        "  status + server CPU ms per delivered event): how many messages, each with its 3 statuses and",
        "  one event, one core of `wagate serve` carries. Per send: send_path's closed loop (accept, plus",
        "  the upstream calls the dispatcher made meanwhile); per status: statuses.py; per event:",
        "  events_delivery's serve CPU % / delivered per second. PostgreSQL's own CPU is not in it.",
    ]
    for database in DATABASES:
        entry = whole[database]
        if entry.get("per_second") is None:
            continue
        event = f" + {_f(entry['event_ms'])}" if entry.get("event_ms") is not None else ""
        text = (
            f"  {TITLE[database]}: 1000 / ({_f(entry['send_ms'])} + 3 x {_f(entry['status_ms'])}{event}) "
            f"= {entry['per_second']:.0f}/s"
        )
        if entry.get("per_second_with_postgres") is not None:
            text += (
                f"; with PostgreSQL's backends' CPU too ({_f(entry['db_send_ms'])} + 3 x "
                f"{_f(entry['db_status_ms'])} + {_f(entry['db_event_ms'])} ms more): "
                f"{entry['per_second_with_postgres']:.0f}/s"
            )
        lines.append(text)
    return lines


def load_notes(figures: Figures) -> list[str]:
    """How busy the rest of the machine was while each figure was taken (% of one core)."""
    parts: list[str] = []
    for database in DATABASES:
        found: list[str] = []
        gateway = figures.send(database)
        for phase in ("open_loop", "closed_loop"):
            if (value := _num(_dig(gateway, phase, "cpu", "other_pct"))) is not None:
                found.append(f"send {phase.split('_')[0]} {value:.0f}")
        for rate in BULK_RATES:
            for run in figures.bulk(database, rate):
                if (value := _num(_dig(run, "cpu", "other_pct"))) is not None:
                    found.append(f"bulk {rate}/s {value:.0f}")
        if (value := _num(_dig(figures.statuses(database), "cpu", "other_pct"))) is not None:
            found.append(f"statuses {value:.0f}")
        if (value := _num(_dig(figures.events(database), "cpu", "other_pct"))) is not None:
            found.append(f"events {value:.0f}")
        if found:
            parts.append(f"  {TITLE[database]}: {', '.join(found)}")
    if not parts:
        return []
    return ["others' CPU while measuring (% of one core; the rest of the machine, not the bench):", *parts]


def missing_notes(rows: list[Row]) -> list[str]:
    by_reason: dict[str, list[tuple[str, str]]] = {}
    for row in rows:
        for database, cell in row.cells.items():
            if cell.why:
                by_reason.setdefault(cell.why, []).append((database, row.target))
    notes = []
    for reason, places in by_reason.items():
        databases = sorted({database for database, _ in places}, key=DATABASES.index)
        targets = list(dict.fromkeys(target for _, target in places))
        where = "every row" if len(targets) == len(rows) else "; ".join(targets)
        notes += textwrap.wrap(
            f"{' and '.join(TITLE[d] for d in databases)}: {reason} [{where}]",
            width=106,
            initial_indent="  ",
            subsequent_indent="      ",
        )
    return notes


def interrupt_on_sigterm() -> Callable[[], bool]:
    """SIGTERM and SIGINT raise KeyboardInterrupt here (no event loop in this process, so raising from
    the handler is safe). SIGINT gets Python's handler even when it was ignored (a background job of a
    shell), so the benchmarks, which turn SIGTERM into SIGINT, start with it at its default and can
    be stopped."""
    received: list[bool] = []

    def handler(_signum: int, _frame: Any) -> None:
        received.append(True)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, handler)
    return lambda: bool(received)


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    terminated = interrupt_on_sigterm()
    started, date = time.monotonic(), utc_stamp()
    postgres_up = "postgresql" in settings.databases and postgres_available()
    if "postgresql" in settings.databases and not postgres_up:
        log("postgresql: 127.0.0.1:5432 does not answer as user postgres; its columns stay empty")
    workdir = settings.keep or Path(tempfile.mkdtemp(prefix="wagate-bench-targets-"))
    workdir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, BenchRun] = {}
    try:
        for name in settings.only:
            if name == "statuses-worker" and not postgres_up:
                continue  # PostgreSQL only: its cell says why it is empty
            runs[name] = run_bench(name, settings, workdir, terminated)
    except KeyboardInterrupt:
        log("interrupted; the running benchmark was stopped")
        return 143 if terminated() else 130
    finally:
        if settings.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    header = {"commit": git_commit(), "date": date, "duration_s": round(time.monotonic() - started, 1)}
    figures = Figures(settings, runs, postgres_up)
    rows, extra = build_rows(figures)
    print(report(settings, figures, rows, extra, header), flush=True)
    failed = [run for run in runs.values() if run.failed]
    write_json(
        settings.json,
        {
            **header,
            "cpus": CPU_COUNT,
            "bare_ok_per_second": figures.bare_per_second(),
            "databases": settings.databases,
            "postgres_answered": postgres_up,
            "rows": [
                {
                    "target": row.target,
                    "wanted": row.wanted,
                    **{
                        database: {
                            "figure": cell.figure,
                            "shown": cell.shown,
                            "ratio": None if cell.ratio is None else round(cell.ratio, 4),
                            "met": cell.met,
                            "why": cell.why,
                        }
                        for database, cell in row.cells.items()
                    },
                }
                for row in rows
            ],
            **extra,
            "benches": {
                run.name: {
                    "command": run.command,
                    "exit_code": run.exit_code,
                    "seconds": run.seconds,
                    "error": run.error,
                    "figures": run.figures,
                }
                for run in runs.values()
            },
        },
    )
    for run in failed:
        print(
            f"\n{Path(run.command[1]).name} failed: {run.error}; the last lines of its stderr:",
            file=sys.stderr,
        )
        print("\n".join(f"    {line}" for line in run.stderr_tail), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
