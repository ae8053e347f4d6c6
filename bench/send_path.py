"""The send path against DESIGN.md's targets, in one run, beside the framework's own ceiling.

1. A bare FastAPI endpoint that parses the same body as a send (bench/bare_app.py), served like
   `wagate serve`: closed-loop requests per second and latency at N connections.
2. The real gateway (simulator + `wagate migrate` + `wagate provision` + `wagate serve`, each its own
   process) on SQLite and, when 127.0.0.1:5432 answers, on a throwaway PostgreSQL database:
   a. an open-loop run at 100 msg/s: accept -> upstream latency, i.e. from the client starting the
      request to the simulator receiving the Cloud API call for that message;
   b. the same closed-loop load as the bare endpoint: accepted sends per second, accept latency;
   and the peak RSS of `wagate serve`.
3. A table, the ratios against the bare endpoint, and each target marked met / not met.

    .venv/bin/python bench/send_path.py [--quick] [--json out.json]

See docs/performance.md for what each figure means and the last recorded run.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from common import (
    CPU_COUNT,
    add_cpu_quota_option,
    add_databases_option,
    add_json_option,
    add_py_spy_option,
    add_quiet_options,
    analyze_postgres,
    cpu_ms_per,
    cpu_snapshot,
    cpu_usage,
    database_for,
    databases_of,
    fmt,
    latency_summary_ms,
    limit_cpu,
    log,
    peak_rss_mb,
    postgres_backend_pids,
    py_spy,
    quiet_machine,
    sigterm_as_interrupt,
    utc_stamp,
    write_json,
)
from loadgen import LoadResult, closed_loop, install_uvloop, open_loop
from stack import BARE_BODY, BARE_HEADERS, BareServer, GatewayStack

# DESIGN.md, "Targets".
TARGET_SQLITE_RATIO = 0.25
TARGET_POSTGRES_RATIO = 0.30
TARGET_POSTGRES_P99_MS = 50.0
A2U_RATE = 100.0  # msg/s of the open loop: the rate at which the two latency targets hold
TARGET_A2U_P50_MS = 5.0
TARGET_A2U_P99_MS = 25.0
TARGET_RSS_MB = 300.0
DRAIN_TIMEOUT = 120.0  # longest wait for the upstream backlog to drain


class Settings(argparse.Namespace):
    quick: bool
    json: Path | None
    concurrency: int
    duration: float
    open_duration: float
    warmup: float
    databases: list[str]
    statuses: bool
    keys: bool
    quiet_wait: float
    quiet_threshold: float
    py_spy: Path | None
    cpu_quota: float | None
    rounds: int
    split_worker: bool


def parse_args(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        description="Send path benchmark (see docs/performance.md).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="3 s runs instead of 10 s (a smoke test)")
    add_json_option(parser)
    parser.add_argument("--concurrency", type=int, default=64, help="closed-loop connections")
    parser.add_argument("--duration", type=float, default=None, help="closed-loop seconds (10; quick 3)")
    parser.add_argument("--open-duration", type=float, default=None, help="open-loop seconds (10; quick 3)")
    parser.add_argument("--warmup", type=float, default=None, help="warm-up seconds per server (2; quick 1)")
    add_databases_option(parser)
    parser.add_argument(
        "--no-statuses",
        dest="statuses",
        action="store_false",
        help="the simulator sends no status webhooks back (isolates the send path)",
    )
    parser.add_argument(
        "--idempotency-keys",
        dest="keys",
        action="store_true",
        help="every send carries its own Idempotency-Key",
    )
    add_quiet_options(parser, wait=60.0)
    add_py_spy_option(parser, "during each open and closed loop")
    add_cpu_quota_option(parser, "the bare endpoint and `wagate serve`")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="closed loops per gateway, each between two of the bare endpoint; the median ratio's counts",
    )
    parser.add_argument(
        "--split-worker",
        action="store_true",
        help="PostgreSQL: `wagate serve --no-dispatcher` takes the sends and a `wagate worker` beside it"
        " sends them; the worker's CPU is shown apart",
    )
    settings = parser.parse_args(argv, namespace=Settings())
    settings.duration = settings.duration or (3.0 if settings.quick else 10.0)
    settings.open_duration = settings.open_duration or (3.0 if settings.quick else 10.0)
    settings.warmup = settings.warmup if settings.warmup is not None else (1.0 if settings.quick else 2.0)
    settings.databases = databases_of(parser, str(settings.databases))
    return settings


def key_header(settings: Settings) -> str | None:
    return "Idempotency-Key" if settings.keys else None


def quiet(settings: Settings, pids: list[int]) -> dict[str, float]:
    return quiet_machine(pids, wait=settings.quiet_wait, threshold=settings.quiet_threshold)


# --------------------------------------------------------------------------- 1. the bare endpoint


class BareEndpoint:
    """The bare FastAPI endpoint, up for the whole run: measured once on its own (the table's row),
    and again right before and right after each gateway's closed loop. This machine's speed moves by
    a third within a minute (a virtual machine whose host takes CPU back), so a gateway's ratio is to
    the bare endpoint's rate around its own closed loop, not to one measured a minute earlier."""

    def __init__(self, settings: Settings, workdir: Path) -> None:
        self.settings = settings
        self.server = BareServer(workdir)
        self.pid = self.server.process.pid
        limit_cpu([self.pid], settings.cpu_quota)

    def load(self, seconds: float) -> LoadResult:
        return asyncio.run(
            closed_loop(
                self.server.url,
                make_body=lambda: BARE_BODY,
                headers=BARE_HEADERS,
                concurrency=self.settings.concurrency,
                duration=seconds,
            )
        )

    def measure(self) -> dict[str, Any]:
        """The table's row: warm-up, a quiet machine, the closed loop."""
        settings = self.settings
        log(f"bare endpoint: warm-up {settings.warmup} s")
        self.load(settings.warmup)
        machine = quiet(settings, [self.pid])
        log(f"bare endpoint: closed loop, {settings.concurrency} connections, {settings.duration} s")
        figures = self.closed_loop()
        figures["machine_before"] = machine
        figures["peak_rss_mb"] = peak_rss_mb(self.pid)
        return figures

    def closed_loop(self) -> dict[str, Any]:
        before = cpu_snapshot([self.pid])
        result = self.load(self.settings.duration)
        after = cpu_snapshot([self.pid])
        figures = result.summary()
        figures["cpu"] = cpu_usage(before, after, {"server": [self.pid]})
        figures["server_cpu_ms_per_ok"] = cpu_ms_per(figures["cpu"]["server_pct"], figures["ok_per_second"])
        return figures


def bare_around(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The bare endpoint's figures around a gateway's closed loop: each side, and their mean."""
    rates = [before["ok_per_second"], after["ok_per_second"]]
    costs = [c for c in (before.get("server_cpu_ms_per_ok"), after.get("server_cpu_ms_per_ok")) if c]
    return {
        "before_ok_per_second": rates[0],
        "after_ok_per_second": rates[1],
        "ok_per_second": round(sum(rates) / 2, 1),
        "server_cpu_ms_per_ok": round(sum(costs) / len(costs), 3) if costs else None,
    }


# --------------------------------------------------------------------------- 2. the gateway


def started_per_second(result: LoadResult) -> float:
    """The rate at which the open loop really started requests (it falls behind if the client is starved)."""
    starts = [s.start_wall for s in result.samples]
    if len(starts) < 2 or starts[-1] <= starts[0]:
        return math.nan
    return round((len(starts) - 1) / (starts[-1] - starts[0]), 1)


def accept_to_upstream(result: LoadResult, upstream: list[dict[str, Any]]) -> dict[str, Any]:
    """Match each accepted send to the simulator's record of its Cloud API call (by our message id)."""
    received = {m["biz_opaque_callback_data"]: float(m["received_at"]) for m in upstream}
    from_start: list[float] = []
    after_201: list[float] = []
    missing = 0
    for sample in result.ok:
        message_id = orjson.loads(sample.body or b"{}").get("id")
        at = received.get(message_id)
        if at is None:
            missing += 1
            continue
        from_start.append(at - sample.start_wall)
        after_201.append(max(0.0, at - sample.end_wall))
    return {
        "definition_from_request_start": (
            "simulator received_at - wall time the client started the POST (accept + queue + upstream call)"
        ),
        "from_request_start": latency_summary_ms(from_start),
        "definition_after_201": (
            "simulator received_at - wall time the 201 reached the client, clamped at 0 "
            "(the part after the reply; the upstream call may even come before the client reads the 201)"
        ),
        "after_201": latency_summary_ms(after_201),
        "after_201_zero_share": round(sum(1 for v in after_201 if v == 0.0) / len(after_201), 3)
        if after_201
        else math.nan,
        "missing_upstream": missing,
    }


def measure_gateway(
    settings: Settings, bare: BareEndpoint, database: str, database_url: str | None, db_name: str | None
) -> dict:
    figures: dict[str, Any] = {"database": database}
    split = settings.split_worker and db_name is not None
    figures["split_worker"] = split
    with GatewayStack(database_url=database_url, messages_per_second=1000, split_worker=split) as stack:
        assert stack.server is not None and stack.sim is not None
        figures["startup_s"] = round(stack.startup_seconds, 2)
        limit_cpu([stack.server.pid], settings.cpu_quota)
        if not settings.statuses:
            stack.sim_configure(auto_statuses=False)
        accepted_total = 0

        def pids() -> dict[str, list[int]]:
            assert stack.server is not None and stack.sim is not None
            groups = {"server": [stack.server.pid], "simulator": [stack.sim.pid]}
            if stack.worker is not None:
                groups["worker"] = [stack.worker.pid]
            if db_name is not None:
                groups["postgres"] = postgres_backend_pids(db_name)
            return groups

        def all_pids() -> list[int]:
            return [pid for group in pids().values() for pid in group]

        def check_alive() -> None:
            for process in (stack.server, stack.sim):
                if process is not None and not process.alive:
                    raise RuntimeError(f"{process.name} died:\n{process.tail()}")

        def settle(what: str) -> None:
            """Wait until every accepted send reached the simulator and its webhooks were delivered."""
            reached, waited = stack.wait_upstream(accepted_total, timeout=DRAIN_TIMEOUT)
            if not reached:
                have = stack.upstream_total()
                log(f"  {what}: upstream has {have} of {accepted_total} after {waited:.0f} s")
            stack.wait_webhooks_idle(timeout=30.0)

        def sends(concurrency: int, seconds: float) -> LoadResult:
            return asyncio.run(
                closed_loop(
                    stack.messages_url,
                    make_body=stack.otp_body,
                    headers=stack.headers,
                    concurrency=concurrency,
                    duration=seconds,
                    unique_header=key_header(settings),
                )
            )

        # Warm-up: imports, caches, connection pools, SQLite pages; not measured.
        log(f"{database}: warm-up {settings.warmup} s")
        warm = sends(min(8, settings.concurrency), settings.warmup)
        if not warm.ok:
            bodies = [s.body for s in warm.samples[:3]]
            raise RuntimeError(f"{database}: warm-up sends were not accepted: {warm.by_status()} {bodies}")
        accepted_total += len(warm.ok)
        settle("warm-up")
        check_alive()
        if db_name is not None:
            analyze_postgres(db_name)

        # (b) open loop at a fixed rate: accept -> upstream.
        machine = quiet(settings, all_pids())
        log(f"{database}: open loop, {A2U_RATE:g} msg/s for {settings.open_duration} s")
        before = cpu_snapshot(all_pids())
        upstream_before = stack.upstream_total()
        with py_spy(stack.server.pid, settings.py_spy, f"{database}-open", settings.open_duration):
            paced = asyncio.run(
                asyncio.wait_for(
                    open_loop(
                        stack.messages_url,
                        make_body=stack.otp_body,
                        headers=stack.headers,
                        rate=A2U_RATE,
                        duration=settings.open_duration,
                        unique_header=key_header(settings),
                    ),
                    timeout=settings.open_duration + 60,
                )
            )
        accepted_total += len(paced.ok)
        after = cpu_snapshot(all_pids())
        reached, _ = stack.wait_upstream(accepted_total, timeout=30.0)
        open_figures = paced.summary()
        open_figures["achieved_rate"] = started_per_second(paced)
        open_figures["accept_to_upstream"] = accept_to_upstream(paced, stack.upstream_messages())
        open_figures["all_reached_upstream"] = reached
        open_figures["upstream_during_run"] = stack.upstream_total() - upstream_before
        open_figures["cpu"] = cpu_usage(before, after, pids())
        open_figures["machine_before"] = machine
        figures["open_loop"] = open_figures
        settle("open loop")
        check_alive()

        # (a) closed loop, the same load as the bare endpoint: accepted per second, between two closed
        # loops of the bare endpoint (its ratio's denominator); `--rounds` times, and the round of the
        # median ratio is the figure.
        def closed_round(number: int) -> dict[str, Any]:
            nonlocal accepted_total
            assert stack.server is not None
            name = f"{database}-closed" + (f"-{number}" if settings.rounds > 1 else "")
            machine = quiet(settings, all_pids())
            log(f"{database}: the bare endpoint's closed loop before it")
            bare_before = bare.closed_loop()
            log(
                f"{database}: closed loop {number}, {settings.concurrency} connections, {settings.duration} s"
            )
            groups_before = pids()
            before = cpu_snapshot([p for g in groups_before.values() for p in g])
            upstream_before = stack.upstream_total()
            with py_spy(stack.server.pid, settings.py_spy, name, settings.duration):
                loaded = sends(settings.concurrency, settings.duration)
            groups_after = pids()
            after = cpu_snapshot([p for g in groups_after.values() for p in g])
            upstream_after = stack.upstream_total()
            log(f"{database}: the bare endpoint's closed loop after it")
            bare_after = bare.closed_loop()
            accepted_total += len(loaded.ok)
            closed_figures = loaded.summary()
            cpu = cpu_usage(before, after, {k: groups_before.get(k, []) + v for k, v in groups_after.items()})
            closed_figures["cpu"] = cpu
            closed_figures["server_cpu_ms_per_ok"] = cpu_ms_per(cpu["server_pct"], loaded.ok_per_second)
            closed_figures["postgres_cpu_ms_per_ok"] = cpu_ms_per(
                cpu.get("postgres_pct"), loaded.ok_per_second
            )
            closed_figures["machine_before"] = machine
            closed_figures["bare_around"] = bare_around(bare_before, bare_after)
            closed_figures["upstream_per_second_during_run"] = round(
                (upstream_after - upstream_before) / loaded.elapsed, 1
            )
            backlog = accepted_total - upstream_after
            drain_start = time.monotonic()
            drained, _ = stack.wait_upstream(accepted_total, timeout=DRAIN_TIMEOUT)
            closed_figures["backlog_at_end"] = backlog
            closed_figures["drain_s"] = round(time.monotonic() - drain_start, 2) if drained else None
            check_alive()
            return closed_figures

        rounds = [closed_round(number) for number in range(1, settings.rounds + 1)]
        ratios = [r["ok_per_second"] / r["bare_around"]["ok_per_second"] for r in rounds]
        median = sorted(range(len(rounds)), key=lambda i: ratios[i])[len(rounds) // 2]
        figures["closed_loop"] = rounds[median]
        figures["closed_loop"]["rounds"] = [
            {
                "ok_per_second": r["ok_per_second"],
                "bare_ok_per_second": r["bare_around"]["ok_per_second"],
                "ratio_to_bare": round(ratio, 3),
                "server_cpu_ms_per_ok": r["server_cpu_ms_per_ok"],
                "p99_ms": r["latency_ok"]["p99_ms"],
            }
            for r, ratio in zip(rounds, ratios, strict=True)
        ]

        figures["accepted_total"] = accepted_total
        figures["peak_rss_mb"] = peak_rss_mb(stack.server.pid)
    return figures


# --------------------------------------------------------------------------- 3. the report


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []

    def add(what: str, value: float | None, target: str, met: bool | None) -> None:
        targets.append({"what": what, "value": value, "target": target, "met": met})

    for name, gateway in results["gateways"].items():
        closed = gateway["closed_loop"]
        around = closed["bare_around"]["ok_per_second"]
        ratio = closed["ok_per_second"] / around if around else math.nan
        gateway["ratio_to_bare"] = round(ratio, 3)
        wanted = TARGET_SQLITE_RATIO if name == "sqlite" else TARGET_POSTGRES_RATIO
        add(f"{name}: accepted/s vs bare", round(ratio, 3), f">= {wanted} x", ratio >= wanted)
        if name == "postgresql":
            p99 = closed["latency_ok"]["p99_ms"]
            add(
                f"{name}: accept p99 at {results['settings']['concurrency']} connections",
                p99,
                f"< {TARGET_POSTGRES_P99_MS:g} ms",
                p99 < TARGET_POSTGRES_P99_MS,
            )
        a2u = gateway["open_loop"]["accept_to_upstream"]["from_request_start"]
        for quantile, bound in (("p50", TARGET_A2U_P50_MS), ("p99", TARGET_A2U_P99_MS)):
            value = a2u[f"{quantile}_ms"]
            add(
                f"{name}: accept->upstream {quantile} at {A2U_RATE:g}/s",
                value,
                f"< {bound:g} ms",
                value < bound,
            )
        rss = gateway["peak_rss_mb"]
        add(
            f"{name}: peak RSS of wagate serve",
            rss,
            f"< {TARGET_RSS_MB:g} MB",
            rss is not None and rss < TARGET_RSS_MB,
        )
    return targets


def report(results: dict[str, Any]) -> str:
    s = results["settings"]
    bare = results["bare"]
    lines = [
        "",
        f"send path benchmark, {results['date']}, {results['machine']['cpus']} CPUs "
        f"({results['machine']['cpu_model']}), Python {results['machine']['python']}",
        f"closed loop: {s['concurrency']} keep-alive connections for {s['duration']:g} s; "
        f"open loop: {A2U_RATE:g} msg/s for {s['open_duration']:g} s; "
        f"status webhooks from the simulator: {'on' if s['statuses'] else 'off'}; "
        f"Idempotency-Key on every send: {'yes' if s.get('keys') else 'no'}",
        "",
        f"{'closed loop':<24}{'ok/s':>8}{'x bare':>8}{'p50 ms':>9}{'p99 ms':>9}{'non-2xx':>8}"
        f"{'srv CPU%':>9}{'srv CPU ms/ok':>14}{'cli CPU%':>9}{'db CPU%':>8}{'others%':>8}",
    ]

    def row(name: str, figures: dict[str, Any], ratio: float | None) -> str:
        cpu = figures["cpu"]
        bad = figures["requests"] - figures["ok"]
        return (
            f"{name:<24}{figures['ok_per_second']:>8.0f}{fmt(ratio, 3):>8}"
            f"{fmt(figures['latency_ok']['p50_ms']):>9}{fmt(figures['latency_ok']['p99_ms']):>9}{bad:>8}"
            f"{fmt(cpu.get('server_pct')):>9}{fmt(figures.get('server_cpu_ms_per_ok'), 3):>14}"
            f"{fmt(cpu.get('client_pct')):>9}{fmt(cpu.get('postgres_pct')):>8}{fmt(cpu.get('other_pct')):>8}"
        )

    lines.append(row("bare FastAPI", bare, 1.0))
    for name, gateway in results["gateways"].items():
        label = f"gateway, {name}" + (" + worker" if gateway.get("split_worker") else "")
        lines.append(row(label, gateway["closed_loop"], gateway.get("ratio_to_bare")))
        worker_pct = gateway["closed_loop"]["cpu"].get("worker_pct")
        if worker_pct is not None:
            lines.append(
                f"  (srv = `wagate serve --no-dispatcher`; the worker sending meanwhile: {worker_pct:.1f} %)"
            )
    lines.append(
        "CPU% is of ONE core (the machine has "
        f"{results['machine']['cpus']}); srv = the server process, cli = this load generator, db = the"
    )
    lines.append("PostgreSQL backends of the bench database, others = the rest of the machine in that run.")
    for name, gateway in results["gateways"].items():
        around = gateway["closed_loop"]["bare_around"]
        lines.append(
            f"x bare of {name}: over the bare endpoint's {around['ok_per_second']:.0f} req/s around its"
            f" closed loop ({around['before_ok_per_second']:.0f} right before,"
            f" {around['after_ok_per_second']:.0f} right after;"
            f" {fmt(around['server_cpu_ms_per_ok'], 3)} ms of CPU a request)"
        )
        rounds = gateway["closed_loop"].get("rounds", [])
        if len(rounds) > 1:
            each = ", ".join(f"{r['ok_per_second']:.0f}/s over {r['bare_ok_per_second']:.0f}" for r in rounds)
            ratios = ", ".join(f"{r['ratio_to_bare']:.3f}" for r in rounds)
            lines.append(f"  {len(rounds)} rounds of {name}: {each}; ratios {ratios}; the median's row above")
    lines += [
        "",
        f"{'open loop at ' + format(A2U_RATE, 'g') + '/s':<24}{'sent/s':>8}{'accept p50/p99 ms':>20}"
        f"{'accept->upstream p50/p99 ms':>30}{'201->upstream p50/p99 ms':>27}{'peak RSS MB':>13}",
    ]

    def p50_p99(latency: dict[str, Any]) -> str:
        return f"{fmt(latency['p50_ms'])} / {fmt(latency['p99_ms'])}"

    for name, gateway in results["gateways"].items():
        paced = gateway["open_loop"]
        a2u = paced["accept_to_upstream"]
        lines.append(
            f"{'gateway, ' + name:<24}{paced['achieved_rate']:>8.0f}{p50_p99(paced['latency_ok']):>20}"
            f"{p50_p99(a2u['from_request_start']):>30}{p50_p99(a2u['after_201']):>27}"
            f"{fmt(gateway['peak_rss_mb']):>13}"
        )
    lines += [
        "",
        "accept->upstream: from the client starting the POST to the simulator receiving the Cloud API call",
        "  for that message (biz_opaque_callback_data = our id), both on this machine's wall clock.",
        "201->upstream: from the 201 reaching the client to that same moment, clamped at 0.",
        "",
        f"{'target':<46}{'value':>10}  {'wanted':<12}result",
    ]
    for target in results["targets"]:
        verdict = "met" if target["met"] else "NOT MET"
        lines.append(f"{target['what']:<46}{fmt(target['value'], 3):>10}  {target['target']:<12}{verdict}")
    for name, gateway in results["gateways"].items():
        closed = gateway["closed_loop"]
        lines.append(
            f"\n{name}: during the closed loop the dispatcher sent "
            f"{closed['upstream_per_second_during_run']:.0f}/s upstream; backlog at the end "
            f"{closed['backlog_at_end']}, drained in {fmt(closed['drain_s'], 2)} s"
        )
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpus": CPU_COUNT,
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "memory_mb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20),
    }


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    terminated = sigterm_as_interrupt()
    uvloop = install_uvloop()
    results: dict[str, Any] = {
        "date": utc_stamp(),
        "machine": machine_info(),
        "settings": {
            "quick": settings.quick,
            "concurrency": settings.concurrency,
            "duration": settings.duration,
            "rate": A2U_RATE,
            "open_duration": settings.open_duration,
            "warmup": settings.warmup,
            "client_uvloop": uvloop,
            "statuses": settings.statuses,
            "keys": settings.keys,
            "databases": settings.databases,
            "split_worker": settings.split_worker,
        },
        "gateways": {},
    }
    workdir = Path(tempfile.mkdtemp(prefix="wagate-bench-bare-"))
    bare = None
    try:
        bare = BareEndpoint(settings, workdir)
        results["bare"] = bare.measure()
        for database in settings.databases:
            with database_for(database) as place:
                if place is not None:
                    results["gateways"][database] = measure_gateway(settings, bare, database, *place)
    except KeyboardInterrupt:
        log("interrupted; servers stopped, temporary files and databases removed")
        return 143 if terminated() else 130
    finally:
        if bare is not None:
            bare.server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    results["targets"] = evaluate(results)
    print(report(results))
    write_json(settings.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
