"""Scale-out on PostgreSQL (issue 15 point 6): what more processes buy on this machine, in one run.

1. API processes. 1, 2 and 3 `wagate serve --no-dispatcher` on one throwaway PostgreSQL database,
   and beside them 1, 2 and 3 bare endpoints (bench/bare_app.py) in the same run: closed-loop
   accepted sends per second at 64 connections spread evenly over the processes (the client
   balances, as an L4 load balancer would, without a balancer's own cost), and the cost per message:
   CPU seconds of every API process per accepted send, from /proc. No worker runs meanwhile, so this
   is the accept path alone (no upstream call, no status webhook); the sends wait in the outbox and
   become the backlog of part 2.
2. Workers. A backlog of single sends on CHANNELS channels at 1000 msg/s each, drained into the
   simulator by 1 `wagate worker`, then (after a new backlog) by 2: sends per second from the
   simulator's receipt times, from the moment the workers own their channels until the first channel
   runs dry, and the workers' CPU per send. A channel is sent by one worker at a time (an advisory
   lock) and a worker takes every due channel it can, so the first worker to look would take them
   all; for the 2-worker run the bench hands them out: it holds half of the channels' locks itself
   while worker A starts, freezes A (SIGSTOP) once it owns its half, lets B take the other half,
   then lets A go on (SIGCONT). The simulator sends no status webhooks.

The machine has 2 cores shared by the load generator, the simulator, PostgreSQL and the processes
under test: past 2 processes nothing can grow linearly, and the curve says how far from it we are.

    .venv/bin/python bench/scale.py [--duration 10] [--json out.json]

docs/performance.md ("Scale-out on PostgreSQL") has the method and the run of record.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import (
    CPU_COUNT,
    LOOPBACK,
    POSTGRES_ADMIN_URL,
    ManagedProcess,
    add_json_option,
    add_quiet_options,
    cpu_ms_per,
    cpu_snapshot,
    cpu_usage,
    free_port,
    log,
    postgres_available,
    postgres_backend_pids,
    quiet_machine,
    sigterm_as_interrupt,
    throwaway_postgres_database,
    utc_stamp,
    wagate_command,
    wait_http_ok,
    write_json,
)
from loadgen import LoadResult, closed_loop, install_uvloop
from stack import BARE_BODY, BARE_HEADERS, BareServer, GatewayStack, next_phone_number

# Client connections in every closed loop. Not DESIGN.md's 64: an API process's read pool opens a
# connection per concurrent request up to 40 (src/wagate/core/db.py), and the machine's PostgreSQL
# (max_connections = 100) is shared with other people's tests, which hold 40 and more at times.
CONCURRENCY = 32
CHANNELS = 4
CHANNEL_RATE = 1000
LOCK_CLASS = 0x77A6  # src/wagate/outbox/ownership.py: the first half of a channel lock's key
OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}


class Settings(argparse.Namespace):
    duration: float
    warmup: float
    processes: list[int]
    workers: list[int]
    backlog: int
    quiet_wait: float
    quiet_threshold: float
    json: Path | None


def parse_args(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        description="Scale-out on PostgreSQL.", formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of each closed loop")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of warm-up before each")
    parser.add_argument("--processes", default="1,2,3", help="API process counts to measure")
    parser.add_argument("--workers", default="1,2", help="worker counts to measure")
    parser.add_argument(
        "--backlog", type=int, default=3000, help="sends waiting per channel when the workers start"
    )
    add_quiet_options(parser, wait=30.0)
    add_json_option(parser)
    args = parser.parse_args(argv, namespace=Settings())
    args.processes = [int(p) for p in str(args.processes).split(",")]
    args.workers = [int(w) for w in str(args.workers).split(",")]
    return args


def quiet(settings: Settings, pids: list[int]) -> dict[str, float]:
    return quiet_machine(pids, wait=settings.quiet_wait, threshold=settings.quiet_threshold)


async def spread_closed_loop(
    urls: list[str], body: Any, headers: dict[str, str], seconds: float
) -> LoadResult:
    """CONCURRENCY connections spread evenly over `urls`, as one result."""
    shares = [CONCURRENCY // len(urls) + (1 if i < CONCURRENCY % len(urls) else 0) for i in range(len(urls))]
    results = await asyncio.gather(
        *(
            closed_loop(
                url,
                make_body=body,
                headers=headers,
                concurrency=share,
                duration=seconds,
            )
            for url, share in zip(urls, shares, strict=True)
        )
    )
    merged = LoadResult("closed", max(r.elapsed for r in results))
    for result in results:
        merged.samples += result.samples
        merged.errors += result.errors
    return merged


def load_figures(
    result: LoadResult, before: Any, after: Any, groups: dict[str, list[int]], machine: dict[str, float]
) -> dict[str, Any]:
    summary = result.summary()
    cpu = cpu_usage(before, after, groups)
    per_second = summary["ok_per_second"]
    figures = {
        "ok_per_second": per_second,
        "requests": summary["requests"],
        "by_status": summary["by_status"],
        "p50_ms": summary["latency_ok"]["p50_ms"],
        "p99_ms": summary["latency_ok"]["p99_ms"],
        "cpu": cpu,
        "machine_before": machine,
    }
    if per_second:
        figures["server_cpu_ms_per_ok"] = cpu_ms_per(cpu["server_pct"], per_second)
        if "postgres_pct" in cpu:
            figures["postgres_cpu_ms_per_ok"] = cpu_ms_per(cpu["postgres_pct"], per_second)
    return figures


# --------------------------------------------------------------------------- part 1


def measure_bare(settings: Settings, count: int, workdir: Path) -> dict[str, Any]:
    servers: list[BareServer] = []
    try:
        for i in range(count):
            servers.append(BareServer(workdir, f"bare-{i}"))
        urls = [server.url for server in servers]
        asyncio.run(spread_closed_loop(urls, lambda: BARE_BODY, BARE_HEADERS, settings.warmup))
        pids = [server.process.pid for server in servers]
        machine = quiet(settings, pids)
        before = cpu_snapshot(pids)
        result = asyncio.run(spread_closed_loop(urls, lambda: BARE_BODY, BARE_HEADERS, settings.duration))
        after = cpu_snapshot(pids)
        return load_figures(result, before, after, {"server": pids}, machine)
    finally:
        for server in servers:
            server.stop()


class Gateway:
    """The simulator and a provisioned database of CHANNELS channels (a GatewayStack that serves
    nothing itself), and API processes and workers started on demand."""

    def __init__(self, stack: GatewayStack, database: str) -> None:
        self.stack = stack
        self.database = database
        self.apis: list[ManagedProcess] = []
        self.api_ports: list[int] = []
        self.workers: list[ManagedProcess] = []
        self._next_channel = 0

    def start_apis(self, count: int) -> None:
        """Exactly `count` API processes, fresh: a process keeps up to 20 idle pool connections once it
        has used them, and the server's connections are shared (see CONCURRENCY). The first listens
        where the simulator sends its webhooks."""
        self.stop_apis()
        self.api_ports = [self.stack.port] + [free_port() for _ in range(count - 1)]
        for i, port in enumerate(self.api_ports):
            # PGAPPNAME names the process's connections in pg_stat_activity (libpq reads it).
            self.apis.append(
                ManagedProcess(
                    f"api-{i + 1}",
                    [*wagate_command(), "serve", "--no-dispatcher", "--host", LOOPBACK, "--port", str(port)],
                    log_dir=self.stack.workdir,
                    env={**self.stack.env, "PGAPPNAME": f"wagate-api-{i + 1}"},
                    cwd=self.stack.workdir,
                )
            )
        for process, port in zip(self.apis, self.api_ports, strict=True):
            wait_http_ok(f"http://{LOOPBACK}:{port}/readyz", process=process)

    def stop_apis(self) -> None:
        for process in self.apis:
            code = process.stop(timeout=30)
            if code != 0:
                log(f"  {process.name} exited with {code}")
        self.apis.clear()

    def start_worker(self, name: str) -> ManagedProcess:
        worker = ManagedProcess(
            name,
            [*wagate_command(), "worker"],
            log_dir=self.stack.workdir,
            env={**self.stack.env, "PGAPPNAME": f"wagate-{name}"},
            cwd=self.stack.workdir,
        )
        self.workers.append(worker)
        return worker

    def stop_workers(self) -> None:
        for worker in self.workers:
            code = worker.stop(timeout=30)
            if code != 0:
                log(f"  {worker.name} exited with {code}")
        self.workers.clear()

    def urls(self, count: int) -> list[str]:
        path = f"/v1/accounts/{self.stack.account_id}/whatsapp/messages"
        return [f"http://{LOOPBACK}:{port}{path}" for port in self.api_ports[:count]]

    @property
    def channel_ids(self) -> list[int]:
        return self.stack.channel_ids

    @property
    def database_url(self) -> str:
        assert self.stack.database_url is not None
        return self.stack.database_url

    @property
    def headers(self) -> dict[str, str]:
        return self.stack.headers

    def body(self) -> bytes:
        """An OTP to a new number, on the channels in turn."""
        channel = self.channel_ids[self._next_channel % len(self.channel_ids)]
        self._next_channel += 1
        body = {"channel_id": channel, "phone_number": next_phone_number(), "template": OTP}
        return json.dumps(body).encode()

    def received(self, channel_id: int) -> list[float]:
        """The simulator's CLOCK_MONOTONIC receipt times of the channel's sends (this process's clock)."""
        sends = self.stack.upstream_messages(self.channel_ids.index(channel_id) + 1)
        return sorted(float(m["received_monotonic"]) for m in sends)

    def stop(self) -> None:
        self.stop_workers()
        self.stop_apis()


def measure_apis(settings: Settings, gateway: Gateway, count: int) -> dict[str, Any]:
    gateway.start_apis(count)
    urls = gateway.urls(count)
    asyncio.run(spread_closed_loop(urls, gateway.body, gateway.headers, settings.warmup))
    api_pids = [p.pid for p in gateway.apis]
    groups = {"server": api_pids, "postgres": postgres_backend_pids(gateway.database)}
    machine = quiet(settings, [pid for g in groups.values() for pid in g])
    before = cpu_snapshot([pid for g in groups.values() for pid in g])
    result = asyncio.run(spread_closed_loop(urls, gateway.body, gateway.headers, settings.duration))
    groups["postgres"] = sorted(set(groups["postgres"]) | set(postgres_backend_pids(gateway.database)))
    after = cpu_snapshot([pid for g in groups.values() for pid in g])
    figures = load_figures(result, before, after, groups, machine)
    figures["connections"] = connections(gateway.database)
    return figures


def connections(database: str) -> dict[str, int]:
    """Open connections to the database by application name (PGAPPNAME of each process)."""
    import psycopg

    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = %s"
            " GROUP BY 1 ORDER BY 1",
            (database,),
        ).fetchall()
    return {str(name): int(n) for name, n in rows}


# --------------------------------------------------------------------------- part 2


def waiting_sends(database_url: str) -> dict[int, int]:
    """Ready send rows per channel."""
    import psycopg

    url = database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT channel_id, count(*) FROM outbox"
            " WHERE kind = 'send_message' AND state = 'ready' GROUP BY 1"
        ).fetchall()
    return {int(c): int(n) for c, n in rows if c is not None}


def lock_holders(database: str) -> dict[int, str]:
    """Channel id -> application name of the connection holding its advisory lock."""
    import psycopg

    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT l.objid, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objsubid = 2 AND l.granted"
            " AND a.datname = %s",
            (LOCK_CLASS, database),
        ).fetchall()
    return {int(objid): str(name) for objid, name in rows}


def channels_of(database: str, pid: int) -> set[int]:
    """The channels whose locks the worker process `pid` holds: its lock connection is named
    `wagate-locks <pid>@<host>` (wagate.outbox.ownership)."""
    return {c for c, name in lock_holders(database).items() if name.startswith(f"wagate-locks {pid}@")}


@contextmanager
def holding_locks(database_url: str, channel_ids: list[int]) -> Iterator[None]:
    """The bench holds these channels' locks, so no worker takes them meanwhile."""
    import psycopg

    url = database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(url, autocommit=True) as conn:
        for channel_id in channel_ids:
            conn.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, channel_id))
        yield


def wait_for(
    what: str, condition: Any, timeout: float = 60.0, watch: list[ManagedProcess] | None = None
) -> None:
    """Wait until `condition()`; fails with the logs' tails of `watch` when one dies or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        dead = [p for p in watch or [] if not p.alive]
        if dead or time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name} (alive: {p.alive})\n{p.tail()}" for p in watch or [])
            raise RuntimeError(f"{what}: not within {timeout} s\n{tails}")
        time.sleep(0.05)


def fill_backlog(settings: Settings, gateway: Gateway) -> dict[int, int]:
    """Single sends through every API process until each channel has --backlog waiting."""
    waiting = waiting_sends(gateway.database_url)
    short = settings.backlog - min(waiting.get(c, 0) for c in gateway.channel_ids)
    if short > 0:
        log(f"  storing {short * CHANNELS} more sends for the backlog")
        for _ in range(100):
            asyncio.run(spread_closed_loop(gateway.urls(len(gateway.apis)), gateway.body, gateway.headers, 5))
            waiting = waiting_sends(gateway.database_url)
            if min(waiting.get(c, 0) for c in gateway.channel_ids) >= settings.backlog:
                break
    return waiting


def measure_workers(settings: Settings, gateway: Gateway, count: int) -> dict[str, Any]:
    channels = gateway.channel_ids
    waiting = fill_backlog(settings, gateway)
    before_counts = {c: len(gateway.received(c)) for c in gateway.channel_ids}
    api_pids = [p.pid for p in gateway.apis]
    quiet(settings, api_pids)
    halves = [gateway.channel_ids[i::count] for i in range(count)]
    names = [f"worker-{chr(ord('a') + i)}" for i in range(count)]
    if count == 1:
        gateway.start_worker(names[0])
        wait_for(
            "worker-a owns every channel",
            lambda: len(lock_holders(gateway.database)) == CHANNELS,
            watch=gateway.workers,
        )
    else:
        # Hand the channels out (see the module's docstring): each worker owns its share.
        with holding_locks(gateway.database_url, [c for share in halves[1:] for c in share]):
            worker_a = gateway.start_worker(names[0])
            wait_for(
                "worker-a owns its share",
                lambda: channels_of(gateway.database, worker_a.pid) == set(halves[0]),
                watch=gateway.workers,
            )
            os.kill(worker_a.pid, signal.SIGSTOP)
        try:
            for index in range(1, count):
                worker = gateway.start_worker(names[index])
                wait_for(
                    f"{names[index]} owns its share",
                    lambda index=index, pid=worker.pid: (
                        channels_of(gateway.database, pid) == set(halves[index])
                    ),
                    watch=gateway.workers,
                )
        finally:
            os.kill(worker_a.pid, signal.SIGCONT)
    start = time.monotonic()
    worker_pids = [w.pid for w in gateway.workers]
    groups = {"workers": worker_pids, "api": api_pids, "postgres": postgres_backend_pids(gateway.database)}
    cpu_before = cpu_snapshot([pid for g in groups.values() for pid in g])
    # Until the first channel runs dry: every channel keeps sending for the whole window.
    wait_for(
        "a channel drained",
        lambda: (
            min(counts.get(c, 0) for counts in [waiting_sends(gateway.database_url)] for c in channels) == 0
        ),
        timeout=600,
        watch=gateway.workers,
    )
    cpu_after = cpu_snapshot([pid for g in groups.values() for pid in g])
    holders = lock_holders(gateway.database)
    wait_for(
        "the backlog drained",
        lambda: sum(waiting_sends(gateway.database_url).values()) == 0,
        timeout=600,
        watch=gateway.workers,
    )
    time.sleep(1.0)
    gateway.stop_workers()
    times = {c: [t for t in gateway.received(c)[before_counts[c] :] if t >= start] for c in channels}
    end = min(ts[-1] for ts in times.values() if ts)
    in_window = {c: sum(1 for t in ts if t <= end) for c, ts in times.items()}
    seconds = end - start
    sent = sum(in_window.values())
    cpu = cpu_usage(cpu_before, cpu_after, groups)
    per_second = sent / seconds if seconds > 0 else 0.0
    return {
        "workers": count,
        "backlog_per_channel": {str(c): waiting.get(c, 0) for c in gateway.channel_ids},
        "owners": {str(c): holders.get(c, "?") for c in gateway.channel_ids},
        "window_s": round(seconds, 2),
        "sent_in_window": sent,
        "sends_per_second": round(per_second, 1),
        "per_channel_per_second": {str(c): round(n / seconds, 1) for c, n in in_window.items()},
        "cpu": cpu,
        "worker_cpu_ms_per_send": round(10 * cpu["workers_pct"] / per_second, 3) if per_second else None,
    }


# --------------------------------------------------------------------------- report


def report(results: dict[str, Any]) -> str:
    lines = [f"scale-out on PostgreSQL, {results['started']}, {CPU_COUNT} cores", ""]
    lines.append(
        "API processes   bare ok/s  (x1)   gateway ok/s  (x1)  x bare  gw CPU ms/ok  bare CPU ms/ok"
        "  gw p99 ms  db CPU%  others%"
    )
    bare1 = results["bare"].get("1", {}).get("ok_per_second") or 0
    gw1 = results["api"].get("1", {}).get("ok_per_second") or 0
    for count in results["processes"]:
        bare = results["bare"][str(count)]
        gw = results["api"][str(count)]
        bare_ok, gw_ok = bare["ok_per_second"], gw["ok_per_second"]
        lines.append(
            f"{count:>13}   {bare_ok:>9.0f} {bare_ok / bare1 if bare1 else 0:>5.2f}"
            f"   {gw_ok:>12.0f} {gw_ok / gw1 if gw1 else 0:>5.2f}  {gw_ok / bare_ok:>6.3f}"
            f"  {gw.get('server_cpu_ms_per_ok', 0):>12.3f}  {bare.get('server_cpu_ms_per_ok', 0):>14.3f}"
            f"  {gw['p99_ms']:>9.1f}  {gw['cpu'].get('postgres_pct', 0):>7.1f}"
            f"  {gw['cpu']['other_pct']:>7.1f}"
        )
    lines += [
        "",
        "workers   sends/s   (x1)  per channel /s              worker CPU ms/send  window s  others%",
    ]
    first = results["workers"].get("1", {}).get("sends_per_second") or 0
    for count in results["worker_counts"]:
        w = results["workers"][str(count)]
        sent = w["sends_per_second"]
        per_channel = " ".join(f"{v:.0f}" for v in w["per_channel_per_second"].values())
        lines.append(
            f"{count:>7}   {sent:>7.0f}  {sent / first if first else 0:>5.2f}"
            f"  {per_channel:<26}  {w['worker_cpu_ms_per_send'] or 0:>18.3f}  {w['window_s']:>8.1f}"
            f"  {w['cpu']['other_pct']:>7.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    sigterm_as_interrupt()
    install_uvloop()
    if not postgres_available():
        log("nothing answers at 127.0.0.1:5432 as user postgres: this bench needs PostgreSQL")
        return 2
    results: dict[str, Any] = {
        "started": utc_stamp(),
        "load_before": os.getloadavg(),
        "processes": settings.processes,
        "worker_counts": settings.workers,
        "bare": {},
        "api": {},
        "workers": {},
    }
    with (
        throwaway_postgres_database() as (url, name),
        GatewayStack(
            database_url=url, messages_per_second=CHANNEL_RATE, channels=CHANNELS, serve=False
        ) as stack,
    ):
        log(f"throwaway database {name}")
        stack.sim_configure(auto_statuses=False)
        gateway = Gateway(stack, name)
        try:
            for count in settings.processes:
                log(f"bare endpoint x{count}")
                results["bare"][str(count)] = measure_bare(settings, count, stack.workdir)
                log(f"  {results['bare'][str(count)]['ok_per_second']} ok/s")
                log(f"gateway API x{count}")
                results["api"][str(count)] = measure_apis(settings, gateway, count)
                log(f"  {results['api'][str(count)]['ok_per_second']} ok/s")
            gateway.start_apis(1)  # fills the backlogs
            for count in settings.workers:
                log(f"workers x{count}")
                results["workers"][str(count)] = measure_workers(settings, gateway, count)
                log(f"  {results['workers'][str(count)]['sends_per_second']} sends/s")
        finally:
            gateway.stop()
    results["load_after"] = os.getloadavg()
    print(report(results))
    write_json(settings.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
