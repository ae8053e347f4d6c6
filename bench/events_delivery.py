"""Outgoing events delivered per second (DESIGN.md target: >= 1000/s), on SQLite and PostgreSQL.

For each database:
1. the gateway (bench/stack.py: simulator, migrate, provision, `wagate serve` with
   WAGATE_ALLOW_PRIVATE_URLS=true, since the receiver is on 127.0.0.1);
2. one account webhook for `message_updated`, registered through the API with the admin key, pointing
   at bench/event_receiver.py (own process: answers 200 at once, counts distinct `webhook-id`s, checks
   the signature of every 100th request);
3. a warm-up backlog, then a backlog of N `message_updated` events (~1 KB bodies shaped like API.md's
   message object, one message each) written straight into the database with the gateway's own
   `write_deliveries`, in one transaction. The dispatcher's event lane finds them by polling (at most
   1 s later), as it finds events that another process wrote;
4. the time from the first to the N-th arrival at the receiver, and from the commit to the N-th; then
   the database must show every delivery `delivered`, with the attempts' latency as the gateway
   measured it (the POST's round trip).

Exits 1 when an event was lost or a signature did not verify; a rate below the target is a finding,
reported as such, not a failure.

    .venv/bin/python bench/events_delivery.py [--events 20000] [--databases sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from common import (
    BENCH_DIR,
    CPU_COUNT,
    LOOPBACK,
    PYTHON,
    ManagedProcess,
    add_databases_option,
    add_json_option,
    add_quiet_options,
    cpu_snapshot,
    cpu_usage,
    database_for,
    databases_of,
    fmt,
    free_port,
    http_json,
    latency_summary_ms,
    log,
    peak_rss_mb,
    postgres_backend_pids,
    quiet_machine,
    sigterm_as_interrupt,
    utc_stamp,
    wait_http_ok,
    write_json,
)
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session
from stack import GatewayStack, next_phone_number

from wagate.core.db import isoformat, utcnow
from wagate.core.ids import new_id
from wagate.events.models import Delivery, DeliveryAttempt, DeliveryKind, DeliveryState
from wagate.events.publish import NewDelivery, webhook_key_prefix, write_deliveries
from wagate.outbox.models import JobKind, OutboxJob

TARGET_PER_SECOND = 1000.0  # DESIGN.md, "Targets"
SECRET_ENV = "WAGATE_BENCH_RECEIVER_SECRET"  # noqa: S105 - the variable bench/event_receiver.py reads
STALL_SECONDS = 60.0  # no new arrival for this long: the lane is stuck, stop waiting
TIMEOUT_SECONDS = 900.0  # the longest wait for a backlog
VERIFY_EVERY = 100  # the receiver checks the signature of every n-th request


class Settings(argparse.Namespace):
    events: int
    warmup: int
    databases: list[str]
    quiet_wait: float
    quiet_threshold: float
    json: Path | None


def parse_args(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        description="Event delivery benchmark.", formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--events", type=int, default=20_000, help="the measured backlog")
    parser.add_argument("--warmup", type=int, default=500, help="events delivered first, not measured")
    add_databases_option(parser)
    add_quiet_options(parser, wait=30.0)
    add_json_option(parser)
    settings = parser.parse_args(argv, namespace=Settings())
    settings.databases = databases_of(parser, str(settings.databases))
    if settings.events < 2 or settings.warmup < 0:
        parser.error("--events must be at least 2 and --warmup at least 0")
    return settings


# --------------------------------------------------------------------------- the events


def message_updated(account_id: int, channel_id: int, n: int) -> tuple[str, dict[str, Any]]:
    """A message id and the body of its `message_updated` (sent -> delivered), as publish.py writes it."""
    message_id = new_id("msg")
    sent = utcnow() - datetime.timedelta(seconds=30)
    delivered = sent + datetime.timedelta(seconds=2)
    return message_id, {
        "event": "message_updated",
        "account_id": account_id,
        "previous_status": "sent",
        "message": {
            "id": message_id,
            "channel_id": channel_id,
            "phone_number": next_phone_number(),
            "status": "delivered",
            "sent_as": "template",
            "template": {
                "name": "order_shipped",
                "language": "en",
                "category": "UTILITY",
                "parameters": [
                    "Aysel Mammadova",
                    f"A-{1_000_000 + n}",
                    "Baku, Nizami street 64, apartment 12",
                    f"https://track.example.com/parcels/AZ{100_000_000 + n}?lang=en&utm_source=whatsapp",
                    "between 14:00 and 18:00 tomorrow; the courier calls 30 minutes before arriving",
                ],
            },
            "text": None,
            "conversation": {"id": 100_000 + n, "status": "open"},
            "cost": {"amount": "0.036", "currency": "AZN", "category": "UTILITY"},
            "batch_id": None,
            "upstream_message_id": f"wamid.HBgMOTk0NTUxMjM0NTY3FQIAERgSQzlCQTk1{n:012d}MjA0RTBFNkUA",
            "status_history": [
                {"status": "sent", "at": isoformat(sent)},
                {"status": "delivered", "at": isoformat(delivered)},
            ],
            "created_at": isoformat(sent),
            "updated_at": isoformat(delivered),
        },
    }


def new_deliveries(count: int, *, account_id: int, channel_id: int, webhook_id: int) -> list[NewDelivery]:
    made = []
    for n in range(count):
        message_id, body = message_updated(account_id, channel_id, n)
        made.append(
            NewDelivery(
                account_id=account_id,
                kind=DeliveryKind.message_updated,
                body=body,
                message_id=message_id,
                ordering_key=webhook_key_prefix(webhook_id) + message_id,
                webhook_id=webhook_id,
            )
        )
    return made


def seed(engine: Engine, deliveries: list[NewDelivery]) -> float:
    """Write the deliveries in one transaction; returns the wall time of the commit's end."""
    with Session(engine) as session, session.begin():
        write_deliveries(session, deliveries)
    return time.time()


# --------------------------------------------------------------------------- one backend


@dataclass
class Run:
    """What the receiver saw of one backlog, and the CPU used while it arrived."""

    stats: dict[str, Any]
    complete: bool
    cpu: dict[str, float]


def wait_for_backlog(
    receiver_url: str,
    expected: int,
    processes: list[ManagedProcess],
    cpu_groups: Callable[[], dict[str, list[int]]],
) -> Run:
    """Poll the receiver until it has `expected` distinct ids; CPU counts from the first new arrival."""
    start_requests = int(http_json("GET", f"{receiver_url}/stats")["requests"])
    deadline = time.monotonic() + TIMEOUT_SECONDS
    before = None
    last_count, last_progress = -1, time.monotonic()
    while True:
        stats = http_json("GET", f"{receiver_url}/stats")
        if before is None and stats["requests"] > start_requests:
            before = cpu_snapshot([pid for group in cpu_groups().values() for pid in group])
        if stats["distinct_ids"] >= expected:
            break
        if stats["requests"] != last_count:
            last_count, last_progress = stats["requests"], time.monotonic()
        now = time.monotonic()
        if now > deadline or now - last_progress > STALL_SECONDS:
            log(f"  gave up waiting: {stats['distinct_ids']} of {expected} distinct ids arrived")
            break
        for process in processes:
            if not process.alive:
                raise RuntimeError(f"{process.name} died:\n{process.tail()}")
        time.sleep(0.1)
    groups = cpu_groups()
    after = cpu_snapshot([pid for group in groups.values() for pid in group])
    by_group: dict[str, Iterable[int]] = dict(groups)
    cpu = cpu_usage(before or after, after, by_group)
    return Run(stats, stats["distinct_ids"] >= expected, cpu)


def database_figures(engine: Engine, expected: int, timeout: float = 30.0) -> dict[str, Any]:
    """Deliveries by state once every one is finished (attempts are recorded just after the POSTs)."""
    deadline = time.monotonic() + timeout
    while True:
        with Session(engine) as session:
            states = {
                str(state): int(count)
                for state, count in session.execute(
                    select(Delivery.state, func.count()).group_by(Delivery.state)
                )
            }
        if states.get(DeliveryState.delivered, 0) >= expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    with Session(engine) as session:
        attempts = session.execute(select(DeliveryAttempt.latency_ms, DeliveryAttempt.succeeded)).all()
        outbox_left = session.scalar(
            select(func.count()).select_from(OutboxJob).where(OutboxJob.kind == JobKind.deliver_event)
        )
    return {
        "states": states,
        "attempts": len(attempts),
        "failed_attempts": sum(1 for _, ok in attempts if not ok),
        "attempt_latency": latency_summary_ms([ms / 1000.0 for ms, _ in attempts]),
        "outbox_left": int(outbox_left or 0),
    }


def delivery_rates(arrivals: list[float], committed_at: float) -> dict[str, Any]:
    """Rates over the measured backlog's arrivals (wall clock of the receiver, same machine)."""
    ordered = sorted(arrivals)
    n = len(ordered)
    span = ordered[-1] - ordered[0]
    low, high = ordered[n // 10], ordered[(9 * n) // 10 - 1]
    # Arrivals in each second from the first: shows whether the rate changes as the backlog drains.
    timeline = [0] * (int(span) + 1)
    for at in ordered:
        timeline[int(at - ordered[0])] += 1
    return {
        "first_to_last_s": round(span, 3),
        "per_second": round((n - 1) / span, 1) if span > 0 else math.nan,
        "middle_80pct_per_second": round(((9 * n) // 10 - 1 - n // 10) / (high - low), 1)
        if high > low
        else math.nan,
        "commit_to_first_s": round(ordered[0] - committed_at, 3),
        "commit_to_last_s": round(ordered[-1] - committed_at, 3),
        "per_second_from_commit": round(n / (ordered[-1] - committed_at), 1),
        "arrivals_each_second": timeline,
    }


def measure(
    settings: Settings, backend: str, database_url: str | None, db_name: str | None
) -> dict[str, Any]:
    figures: dict[str, Any] = {"backend": backend, "events": settings.events, "warmup": settings.warmup}
    with GatewayStack(database_url=database_url, extra_env={"WAGATE_ALLOW_PRIVATE_URLS": "true"}) as stack:
        assert stack.server is not None and stack.database_url is not None
        server = stack.server
        receiver_port = free_port()
        receiver_url = f"http://{LOOPBACK}:{receiver_port}"
        webhook = http_json(
            "POST",
            f"{stack.url}/v1/accounts/{stack.account_id}/webhooks",
            {"url": f"{receiver_url}/events", "events": ["message_updated"]},
            headers=stack.headers,
        )
        receiver = ManagedProcess(
            "receiver",
            [
                PYTHON,
                str(BENCH_DIR / "event_receiver.py"),
                *("--port", str(receiver_port), "--verify-every", str(VERIFY_EVERY)),
            ],
            log_dir=stack.workdir,
            env={**stack.env, SECRET_ENV: webhook["secret"]},
            cwd=stack.workdir,
        )
        # The same database as `serve`, through the blocking driver; SQLite waits for the writer's lock.
        engine = stack.sync_engine()
        try:
            wait_http_ok(f"{receiver_url}/stats", process=receiver)
            processes = [server, receiver]

            def cpu_groups() -> dict[str, list[int]]:
                groups = {"server": [server.pid], "receiver": [receiver.pid]}
                if db_name is not None:
                    groups["postgres"] = postgres_backend_pids(db_name)
                return groups

            def backlog(count: int) -> list[NewDelivery]:
                return new_deliveries(
                    count, account_id=stack.account_id, channel_id=stack.channel_id, webhook_id=webhook["id"]
                )

            if settings.warmup:
                log(f"{backend}: warm-up, {settings.warmup} events")
                seed(engine, backlog(settings.warmup))
                warm = wait_for_backlog(receiver_url, settings.warmup, processes, cpu_groups)
                if not warm.complete:
                    raise RuntimeError(f"{backend}: the warm-up events did not all arrive: {warm.stats}")

            events = backlog(settings.events)
            figures["body_bytes_mean"] = round(sum(len(orjson.dumps(d.body)) for d in events) / len(events))
            figures["machine_before"] = quiet_machine(
                [server.pid, receiver.pid], wait=settings.quiet_wait, threshold=settings.quiet_threshold
            )
            log(f"{backend}: seeding {settings.events} events in one transaction")
            seed_started = time.time()
            committed_at = seed(engine, events)
            figures["seed_s"] = round(committed_at - seed_started, 3)
            run = wait_for_backlog(receiver_url, settings.warmup + settings.events, processes, cpu_groups)
            arrivals = http_json("GET", f"{receiver_url}/arrivals", timeout=60)["arrivals"]
            measured = arrivals[settings.warmup :]
            figures["receiver"] = run.stats
            figures["complete"] = run.complete
            figures["duplicates"] = run.stats["requests"] - run.stats["distinct_ids"]
            figures["cpu"] = run.cpu
            if len(measured) >= 2:
                figures["rates"] = delivery_rates(measured, committed_at)
            figures["database"] = database_figures(engine, settings.warmup + settings.events)
            figures["peak_rss_mb"] = peak_rss_mb(server.pid)
        finally:
            engine.dispose()
            receiver.stop()
    expected = settings.warmup + settings.events
    figures["lost"] = expected - figures["database"]["states"].get(DeliveryState.delivered, 0)
    figures["ok"] = (
        figures["complete"] and figures["lost"] == 0 and figures["receiver"]["signature_failures"] == 0
    )
    return figures


# --------------------------------------------------------------------------- the report


def report(results: dict[str, Any]) -> str:
    lines = [
        "",
        f"event delivery benchmark, {results['date']}, {CPU_COUNT} CPUs, "
        f"{results['settings']['events']} events after {results['settings']['warmup']} warm-up events, "
        "one account webhook on 127.0.0.1",
        "",
        "| backend | delivered/s | middle 80 %/s | first->last s | commit->last s | attempt p50/p99 ms "
        "| sigs checked/failed | lost | dup | serve CPU% | receiver CPU% | db CPU% | others% | peak RSS MB "
        f"| >= {TARGET_PER_SECOND:g}/s met? |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, figures in results["backends"].items():
        rates = figures.get("rates", {})
        latency = figures["database"]["attempt_latency"]
        cpu = figures["cpu"]
        receiver = figures["receiver"]
        rate = rates.get("per_second", math.nan)
        lines.append(
            f"| {name} | {fmt(rate)} | {fmt(rates.get('middle_80pct_per_second'))} "
            f"| {fmt(rates.get('first_to_last_s'), 2)} | {fmt(rates.get('commit_to_last_s'), 2)} "
            f"| {fmt(latency['p50_ms'])} / {fmt(latency['p99_ms'])} "
            f"| {receiver['verified']} / {receiver['signature_failures']} | {figures['lost']} "
            f"| {figures['duplicates']} | {fmt(cpu.get('server_pct'))} | {fmt(cpu.get('receiver_pct'))} "
            f"| {fmt(cpu.get('postgres_pct'))} | {fmt(cpu.get('other_pct'))} | {fmt(figures['peak_rss_mb'])} "
            f"| {'yes' if rate >= TARGET_PER_SECOND else 'no'} |"
        )
    lines += [
        "",
        "delivered/s: (N - 1) / (N-th arrival - first arrival) at the receiver; middle 80 %: the same",
        "between the arrivals at 10 % and 90 % (no ramp-up, no tail). commit->last: from the commit of",
        "the backlog (the lane polls every second at most) to the N-th arrival. attempt latency: the",
        "POST's round trip as the gateway recorded it, warm-up included. CPU% is of ONE core, from the",
        "first to the last arrival; others = the rest of the machine meanwhile. lost = written but not",
        "`delivered` in the database; dup = requests beyond the distinct webhook-ids.",
    ]
    for name, figures in results["backends"].items():
        lines.append(
            f"{name}: seeding took {figures['seed_s']} s, mean body {figures['body_bytes_mean']} bytes, "
            f"deliveries by state {figures['database']['states']}, "
            f"{figures['database']['failed_attempts']} failed attempts, "
            f"{figures['database']['outbox_left']} outbox rows left; arrivals in each second from the "
            f"first: {' '.join(str(c) for c in figures.get('rates', {}).get('arrivals_each_second', []))}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    terminated = sigterm_as_interrupt()
    results: dict[str, Any] = {
        "date": utc_stamp(),
        "settings": {
            "events": settings.events,
            "warmup": settings.warmup,
            "databases": settings.databases,
            "verify_every": VERIFY_EVERY,
        },
        "backends": {},
    }
    try:
        for database in settings.databases:
            with database_for(database) as place:
                if place is not None:
                    results["backends"][database] = measure(settings, database, *place)
    except KeyboardInterrupt:
        log("interrupted; servers stopped, temporary files and databases removed")
        return 143 if terminated() else 130
    print(report(results))
    write_json(settings.json, results)
    failed = [name for name, figures in results["backends"].items() if not figures["ok"]]
    if failed:
        log(f"events lost or signatures failed on: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
