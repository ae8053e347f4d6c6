"""Bulk pacing against DESIGN.md's target: "bulk of 1000 at a channel limit of 80/s and 1000/s: >= 98 %
of the limit, never above it in any 1 s window", on SQLite and PostgreSQL.

For each backend and each rate:
1. the gateway (bench/stack.py: simulator in its own process, `wagate migrate`, `wagate provision` of
   one channel whose `messages_per_second` is the rate, `wagate serve`); a few single sends warm it up
   (the channel's lane starts, connections open), then a pause empties the limiter's window;
2. `POST .../whatsapp/bulk_messages` of N distinct valid numbers (template otp_code) with the
   administrator key: the time to its 202;
3. optionally one single OTP (`POST .../whatsapp/messages`) mid-batch: from its 201 to its arrival at
   the simulator, and how many bulk sends arrived in between (singles go before bulk); after the
   run, another batch posted while OTPs stream in one after another: how long storing it holds them
   up (apart from the run, since those OTPs take room in the channel's window);
4. a wait until the simulator has every send and `GET .../bulk_messages/{batch_id}` says completed;
5. from the simulator's log (its CLOCK_MONOTONIC at receipt, the same clock as this process's): the
   sends per second from the first send of the run to the last, and between the 10 % and 90 % ones;
   the most sends in any sliding window [t, t + 1 s), counted with the simulator's own function (the
   rule behind its 130429); 202 -> completed from the batch's `completed_at`.

The simulator's own limit (`rate_limit_per_second`) is off by default, so every send the gateway makes
is recorded and the window figure is what the gateway really did. With --sim-limit it is set to the
channel's rate: a send over it is refused with 130429 and never recorded, so the window figure can no
longer exceed the limit by construction; an excess shows instead as refused sends (counted from the
outbox rows whose last error is 130429) and as the channel's throttle pause (>= 0.9 s, see the longest
gap), which costs the rate.

Exits 1 when a message was lost or sent twice; rates and windows are findings, reported as met? yes/no.

    .venv/bin/python bench/bulk.py [--rates 80,1000] [--backends sqlite,postgresql] [--repeat 2]
        [--recipients 1000] [--no-single] [--sim-limit] [--json out.json] [--py-spy DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import math
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from common import (
    CPU_COUNT,
    cpu_snapshot,
    cpu_usage,
    limit_cpu,
    no_nan,
    peak_rss_mb,
    postgres_available,
    postgres_backend_pids,
    sigterm_as_interrupt,
    start_py_spy,
    summarize_collapsed,
    throwaway_postgres_database,
    utc_stamp,
    wait_for_quiet,
)
from sqlalchemy import Engine, create_engine, select
from stack import GatewayStack, next_phone_number

from wagate.outbox.models import JobKind, OutboxJob
from wagate.simulator.state import RATE_WINDOW_SECONDS, max_in_window

TARGET_SHARE = 0.98  # DESIGN.md, "Targets": >= 98 % of the limit
# src/wagate/outbox/limiter.py: the gateway's pace (PACE), so its steady ceiling is rate / 1.01; its
# promise is kept over 1 s windows, each send counted from Meta's answer.
LIMITER_WINDOW = 1.01
OTP_TEMPLATE = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
THROTTLED = "130429"
STALL_SECONDS = 90.0  # no new send for this long: stop waiting (a throttled channel pauses up to 60 s)
POLL_SECONDS = 0.1


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Settings(argparse.Namespace):
    backends: list[str]
    rates: list[int]
    recipients: int
    batches: int
    repeat: int
    single: bool
    single_at: float
    sim_limit: bool
    sim_latency: float
    receipt_margin: float | None
    split_worker: bool
    statuses: bool
    warmup: int
    timeout: float
    complete_timeout: float
    stuck_after: float
    quiet_wait: float
    quiet_threshold: float
    json: Path | None
    py_spy: Path | None
    cpu_quota: float | None


def _int_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def parse_args(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        description="Bulk pacing benchmark.", formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--backends",
        default="sqlite,postgresql",
        help="comma-separated; postgresql is skipped when 127.0.0.1:5432 does not answer",
    )
    parser.add_argument("--rates", default="80,1000", help="channel limits (messages_per_second) to run")
    parser.add_argument("--recipients", type=int, default=1000, help="numbers per batch (1..1000)")
    parser.add_argument(
        "--batches", type=int, default=1, help="batches posted back to back per run (the target is about 1)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="measured runs per backend and rate")
    parser.add_argument(
        "--no-single", dest="single", action="store_false", help="no single OTP sent mid-batch"
    )
    parser.add_argument(
        "--single-at",
        type=float,
        default=0.4,
        help="when the single OTP is sent, as a share of the batch's ideal duration after the 202",
    )
    parser.add_argument(
        "--sim-limit",
        action="store_true",
        help="set the simulator's rate_limit_per_second to the channel's rate (an excess becomes 130429)",
    )
    parser.add_argument(
        "--sim-latency",
        type=float,
        default=0.0,
        help="the simulator answers each send this many seconds after it was received (the real Cloud "
        "API takes a few hundred milliseconds)",
    )
    parser.add_argument(
        "--split-worker",
        action="store_true",
        help="PostgreSQL only: `wagate serve --no-dispatcher` and a `wagate worker` (the sends on a loop of "
        "their own)",
    )
    parser.add_argument(
        "--receipt-margin",
        type=float,
        default=None,
        help="the gateway's WAGATE_UPSTREAM_RECEIPT_MARGIN_SECONDS (unset: each send counts from its answer)",
    )
    parser.add_argument(
        "--no-statuses",
        dest="statuses",
        action="store_false",
        help="the simulator sends no status webhooks back (about 2 per message otherwise)",
    )
    parser.add_argument("--warmup", type=int, default=5, help="single sends before the first run")
    parser.add_argument("--timeout", type=float, default=600.0, help="longest wait for one run's sends")
    parser.add_argument(
        "--complete-timeout",
        type=float,
        default=100.0,
        help="longest wait for `completed` once every send arrived (an in_flight row is released and "
        "sent again after upstream timeout + grace = 75 s by default; this must outlast that)",
    )
    parser.add_argument(
        "--stuck-after",
        type=float,
        default=15.0,
        help="stop waiting for `completed` when the batch has shown 0 pending for this long",
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=30.0,
        help="before each run, wait up to this many seconds for other work on the machine to stop",
    )
    parser.add_argument(
        "--quiet-threshold", type=float, default=25.0, help="'quiet': others use < this %% of one core"
    )
    parser.add_argument(
        "--cpu-quota",
        type=float,
        default=None,
        metavar="CORES",
        help="run `wagate serve` on at most this much CPU (a slower machine; root; see common.limit_cpu)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this file")
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="DIR",
        help="sample `wagate serve` with py-spy (GIL holder) from the 202 to the batch's ideal end; to DIR",
    )
    settings = parser.parse_args(argv, namespace=Settings())
    settings.backends = [b.strip() for b in str(settings.backends).split(",") if b.strip()]
    for name in settings.backends:
        if name not in ("sqlite", "postgresql"):
            parser.error(f"unknown backend {name!r}")
    try:
        settings.rates = _int_list(str(settings.rates))
    except ValueError:
        parser.error("--rates takes comma-separated whole numbers, e.g. 80,1000")
    if not settings.rates or min(settings.rates) < 1:
        parser.error("--rates needs at least one rate, each at least 1")
    if not 2 <= settings.recipients <= 1000:
        parser.error("--recipients must be 2..1000 (API.md section 6 allows at most 1000)")
    if settings.batches < 1 or settings.repeat < 1 or settings.warmup < 0:
        parser.error("--batches and --repeat must be at least 1, --warmup at least 0")
    if not 0.0 <= settings.single_at <= 1.0:
        parser.error("--single-at is a share, 0..1")
    return settings


# --------------------------------------------------------------------------- the gateway's API


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any
    started: float  # monotonic, before the request
    answered: float  # monotonic, after the whole answer was read
    answered_wall: float


def api(stack: GatewayStack, method: str, path: str, body: Any = None, *, timeout: float = 60.0) -> Answer:
    data = None if body is None else orjson.dumps(body)
    request = urllib.request.Request(  # noqa: S310 - the gateway on 127.0.0.1
        stack.url + path, data=data, method=method, headers=stack.headers
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            raw, status = response.read(), int(response.status)
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{method} {path} answered {exc.code}: {exc.read()[:2000]!r}") from None
    return Answer(status, orjson.loads(raw) if raw else None, started, time.monotonic(), time.time())


def bulk_path(stack: GatewayStack) -> str:
    return f"/v1/accounts/{stack.account_id}/whatsapp/bulk_messages"


def messages_path(stack: GatewayStack) -> str:
    return f"/v1/accounts/{stack.account_id}/whatsapp/messages"


def send_single(stack: GatewayStack) -> tuple[str, Answer]:
    number = next_phone_number()
    body = {"channel_id": stack.channel_id, "phone_number": number, "template": OTP_TEMPLATE}
    answer = api(stack, "POST", messages_path(stack), body)
    if answer.status != 201:
        raise RuntimeError(f"a single send answered {answer.status}: {answer.body}")
    return number, answer


def wait_batches_completed(
    stack: GatewayStack, batch_ids: list[str], *, timeout: float, stuck_after: float
) -> tuple[list[dict[str, Any]], float]:
    """GET each batch until it says completed; returns the last answers and the seconds waited.

    Gives up after `timeout`, or once every unfinished batch has shown no pending recipient for
    `stuck_after` seconds: nothing is left to send, so nothing will complete it any more.
    """
    start = time.monotonic()
    views: dict[str, dict[str, Any]] = {}
    idle_since: float | None = None
    while True:
        for batch_id in batch_ids:
            if views.get(batch_id, {}).get("status") != "completed":
                views[batch_id] = api(stack, "GET", f"{bulk_path(stack)}/{batch_id}").body
        now = time.monotonic()
        unfinished = [v for v in views.values() if v["status"] != "completed"]
        if not unfinished or now - start > timeout:
            break
        if all(v["counts"]["pending"] == 0 for v in unfinished):
            idle_since = idle_since or now
            if now - idle_since > stuck_after:
                break
        else:
            idle_since = None
        time.sleep(0.2)
    return [views[b] for b in batch_ids], round(time.monotonic() - start, 1)


# --------------------------------------------------------------------------- 130429 (with --sim-limit)


@contextlib.contextmanager
def outbox_reader(stack: GatewayStack) -> Iterator[Engine]:
    """A blocking engine on the gateway's database (SQLite readers do not block its writer in WAL)."""
    assert stack.database_url is not None
    url = stack.database_url.replace("sqlite+aiosqlite:", "sqlite:", 1)
    engine = create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {})
    try:
        yield engine
    finally:
        engine.dispose()


def throttled_rows(engine: Engine) -> set[int]:
    """Send rows waiting for a retry after a 130429 (a refused send waits >= 0.4 s, polls are 0.1 s apart)."""
    with engine.connect() as conn:
        return set(
            conn.scalars(
                select(OutboxJob.id).where(
                    OutboxJob.kind == JobKind.send_message, OutboxJob.last_error.like(f"%{THROTTLED}%")
                )
            )
        )


# --------------------------------------------------------------------------- figures


def spacing_figures(first_times: list[float], all_times: list[float], rate: int) -> dict[str, Any]:
    """Rates over each message's first send, windows over every send of the run (a repeat counts
    against the limit too); the simulator's monotonic seconds at receipt."""
    ordered = sorted(first_times)
    n = len(ordered)
    span = ordered[-1] - ordered[0] if n > 1 else 0.0
    low, high = n // 10, (9 * n) // 10 - 1
    per_second = (n - 1) / span if span > 0 else math.nan
    middle = (high - low) / (ordered[high] - ordered[low]) if ordered[high] > ordered[low] else math.nan
    every = sorted(all_times)
    timeline = [0] * (int(every[-1] - every[0]) + 1)
    for at in every:
        timeline[int(at - every[0])] += 1
    gaps = [b - a for a, b in itertools.pairwise(ordered)]
    return {
        "sends": n,
        "sends_with_repeats": len(every),
        "first_to_last_s": round(span, 3),
        "ideal_first_to_last_s": round((n - 1) / rate, 3),
        "per_second": round(per_second, 1),
        "middle_80pct_per_second": round(middle, 1),
        "pct_of_limit": round(100 * per_second / rate, 2),
        "middle_pct_of_limit": round(100 * middle / rate, 2),
        "max_in_any_1s_window": max_in_window(every, RATE_WINDOW_SECONDS),
        "max_in_any_limiter_window": max_in_window(every, LIMITER_WINDOW),
        "longest_gap_ms": round(1000 * max(gaps), 1) if gaps else math.nan,
        "sends_each_second": timeline,
    }


def message_checks(
    upstream: list[dict[str, Any]], expected: dict[str, str], stray_after: float
) -> dict[str, Any]:
    """Each expected message id (-> its number) must be at the simulator exactly once, to its number."""
    seen: dict[str, int] = {}
    wrong_number = 0
    for record in upstream:
        message_id = record.get("biz_opaque_callback_data")
        if message_id in expected:
            seen[message_id] = seen.get(message_id, 0) + 1
            if record["to"].lstrip("+") != expected[message_id].lstrip("+"):
                wrong_number += 1
    stray = sum(
        1
        for r in upstream
        if r.get("biz_opaque_callback_data") not in expected and r["received_monotonic"] >= stray_after
    )
    return {
        "expected": len(expected),
        "lost": sum(1 for m in expected if m not in seen),
        "sent_twice": sum(1 for count in seen.values() if count > 1),
        "wrong_number": wrong_number,
        "stray_sends": stray,  # other sends on the channel during the run (there should be none)
    }


def _completed_seconds(view: dict[str, Any], answered_wall: float) -> float:
    completed_at = view.get("completed_at")
    if not completed_at:
        return math.nan
    at = datetime.datetime.fromisoformat(str(completed_at).replace("Z", "+00:00")).timestamp()
    return round(at - answered_wall, 3)


# --------------------------------------------------------------------------- one run


@dataclass
class Context:
    settings: Settings
    backend: str
    rate: int
    stack: GatewayStack
    db_name: str | None
    reader: Engine | None


def cpu_groups(ctx: Context) -> dict[str, list[int]]:
    assert ctx.stack.server is not None and ctx.stack.sim is not None
    groups = {"server": [ctx.stack.server.pid], "simulator": [ctx.stack.sim.pid]}
    if ctx.stack.worker is not None:
        groups["server"].append(ctx.stack.worker.pid)
    if ctx.db_name is not None:
        groups["postgres"] = postgres_backend_pids(ctx.db_name)
    return groups


def _profile(settings: Settings, spy: subprocess.Popen[bytes] | None, name: str) -> dict[str, Any] | None:
    if spy is None or settings.py_spy is None:
        return None
    try:
        spy.wait(60)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait(5)
    path = settings.py_spy / f"{name}.txt"
    if not path.exists():
        return {"error": f"py-spy wrote nothing (exit code {spy.returncode})"}
    summary = summarize_collapsed(path)
    (settings.py_spy / f"{name}.summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return {"stacks": str(path), **summary}


def prepare_run(ctx: Context) -> dict[str, Any]:
    """Status webhooks of earlier sends delivered, the machine quiet, the limiter's window empty."""
    stack, settings = ctx.stack, ctx.settings
    stack.wait_webhooks_idle(timeout=60.0)
    assert stack.server is not None and stack.sim is not None
    machine: dict[str, Any] = {}
    if settings.quiet_wait > 0:
        machine = wait_for_quiet(
            [stack.server.pid, stack.sim.pid],
            threshold_pct=settings.quiet_threshold,
            timeout=settings.quiet_wait,
        )
        if machine["other_pct"] >= settings.quiet_threshold:
            log(
                f"  the machine is not quiet: others use {machine['other_pct']} % of a core; measuring anyway"
            )
    records = stack.upstream_messages()
    if records:  # the last send must be out of the gateway's window (1.01 s) before the batch
        idle_for = time.monotonic() - max(float(r["received_monotonic"]) for r in records)
        if idle_for < 1.5:
            time.sleep(1.5 - idle_for)
    return machine


def run_once(ctx: Context, run: int) -> dict[str, Any]:
    stack, settings, rate = ctx.stack, ctx.settings, ctx.rate
    assert stack.server is not None and stack.sim is not None
    name = f"{ctx.backend}-{rate}-run{run}"
    figures: dict[str, Any] = {"backend": ctx.backend, "rate": rate, "run": run}
    figures["machine_before"] = prepare_run(ctx)
    base = stack.upstream_total()
    bulk_sends = settings.batches * settings.recipients
    expected_total = base + bulk_sends + (1 if settings.single else 0)
    ideal = bulk_sends / rate
    bodies = [
        {
            "channel_id": stack.channel_id,
            "template": OTP_TEMPLATE,
            "phone_numbers": [next_phone_number() for _ in range(settings.recipients)],
        }
        for _ in range(settings.batches)
    ]
    log(f"{name}: {settings.batches} x {settings.recipients} recipients at {rate}/s (ideal {ideal:.2f} s)")

    groups = cpu_groups(ctx)
    before = cpu_snapshot([pid for group in groups.values() for pid in group])
    posts: list[Answer] = []
    for body in bodies:
        answer = api(stack, "POST", bulk_path(stack), body)
        if answer.status != 202:
            raise RuntimeError(f"{name}: the batch answered {answer.status}: {answer.body}")
        posts.append(answer)
    spy = None
    if settings.py_spy is not None:
        settings.py_spy.mkdir(parents=True, exist_ok=True)
        spy = start_py_spy(stack.server.pid, settings.py_spy / f"{name}.txt", max(2.0, ideal + 1.0))

    single: tuple[str, Answer] | None = None
    single_due = posts[0].answered + settings.single_at * ideal
    throttled: set[int] = set()
    deadline = posts[0].started + settings.timeout
    total, last_total, last_progress = base, -1, time.monotonic()
    while True:
        now = time.monotonic()
        if settings.single and single is None and now >= single_due:
            single = send_single(stack)
        total = stack.upstream_total()
        if ctx.reader is not None:
            throttled |= throttled_rows(ctx.reader)
        if total >= expected_total and (single is not None or not settings.single):
            break
        if total != last_total:
            last_total, last_progress = total, now
        if now > deadline or now - last_progress > STALL_SECONDS:
            log(f"  gave up waiting: the simulator has {total - base} of {expected_total - base} sends")
            break
        for process in (stack.server, stack.sim):
            if not process.alive:
                raise RuntimeError(f"{process.name} died:\n{process.tail()}")
        time.sleep(POLL_SECONDS)
    after = cpu_snapshot([pid for group in cpu_groups(ctx).values() for pid in group])
    figures["cpu"] = cpu_usage(before, after, dict(cpu_groups(ctx)))
    views, figures["completion_wait_s"] = wait_batches_completed(
        stack,
        [p.body["batch_id"] for p in posts],
        timeout=settings.complete_timeout,
        stuck_after=settings.stuck_after,
    )
    if ctx.reader is not None:
        throttled |= throttled_rows(ctx.reader)
    figures["profile"] = _profile(settings, spy, name)

    upstream = stack.upstream_messages()
    bulk_ids: dict[str, str] = {}
    for view in views:
        for recipient in view["recipients"]:
            if recipient["message_id"] is not None:
                bulk_ids[recipient["message_id"]] = recipient["phone_number"]
    expected = dict(bulk_ids)
    if single is not None:
        expected[single[1].body["id"]] = single[0]
    # Each message's first send (the log is in order of receipt), and every send since the POST.
    first_records: dict[str, dict[str, Any]] = {}
    for record in upstream:
        message_id = record.get("biz_opaque_callback_data")
        if message_id in expected and message_id not in first_records:
            first_records[message_id] = record
    run_records = list(first_records.values())
    every_send = [
        float(r["received_monotonic"]) for r in upstream if float(r["received_monotonic"]) >= posts[0].started
    ]
    figures["checks"] = message_checks(upstream, expected, stray_after=posts[0].started)
    figures["checks"]["batch_rejected"] = sum(int(p.body["rejected"]) for p in posts)
    figures["checks"]["batch_accepted"] = sum(int(p.body["accepted"]) for p in posts)
    figures["batches"] = [
        {
            "batch_id": view["batch_id"],
            "status": view["status"],
            "counts": view["counts"],
            "post_to_202_ms": round(1000 * (post.answered - post.started), 1),
            "202_to_completed_s": _completed_seconds(view, post.answered_wall),
        }
        for view, post in zip(views, posts, strict=True)
    ]
    figures["completed"] = all(view["status"] == "completed" for view in views)
    times = [float(r["received_monotonic"]) for r in run_records]
    if len(times) >= 2:
        figures["spacing"] = spacing_figures(times, every_send, rate)
        figures["202_to_first_send_ms"] = round(1000 * (min(times) - posts[0].answered), 1)
        figures["202_to_last_send_s"] = round(max(times) - posts[-1].answered, 3)
    figures["throttled_sends"] = len(throttled) if ctx.reader is not None else None
    if single is not None:
        figures["single"] = single_figures(single, run_records, bulk_ids)
    if settings.single:
        figures["during_post"] = singles_while_stored(ctx)
    figures["peak_rss_mb"] = peak_rss_mb(stack.server.pid)
    spacing = figures.get("spacing", {})
    figures["rate_met"] = spacing.get("pct_of_limit", 0.0) >= 100 * TARGET_SHARE
    figures["window_met"] = spacing.get("max_in_any_1s_window", math.inf) <= rate
    figures["ok"] = figures["checks"]["lost"] == 0 and figures["checks"]["sent_twice"] == 0
    return figures


@contextlib.contextmanager
def singles_meanwhile(stack: GatewayStack, enabled: bool) -> Iterator[list[tuple[str, Answer]]]:
    """Single OTPs one after another (each waits for its 201) while the batch's POST is answered."""
    sent: list[tuple[str, Answer]] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            sent.append(send_single(stack))

    thread = threading.Thread(target=loop, name="singles-meanwhile", daemon=True)
    if enabled:
        thread.start()
    try:
        yield sent
    finally:
        stop.set()
        if enabled:
            thread.join(timeout=30)


def singles_while_stored(ctx: Context) -> dict[str, Any]:
    """Another batch, posted while single OTPs stream in: how long its storing holds them up. Apart
    from the measured run, because those OTPs take room in the channel's window before the batch."""
    stack, settings = ctx.stack, ctx.settings
    body = {
        "channel_id": stack.channel_id,
        "template": OTP_TEMPLATE,
        "phone_numbers": [next_phone_number() for _ in range(settings.recipients)],
    }
    with singles_meanwhile(stack, True) as during:
        answer = api(stack, "POST", bulk_path(stack), body)
    wait_batches_completed(
        stack, [answer.body["batch_id"]], timeout=settings.complete_timeout, stuck_after=settings.stuck_after
    )
    first_records: dict[str, dict[str, Any]] = {}
    for record in stack.upstream_messages():
        first_records.setdefault(str(record.get("biz_opaque_callback_data")), record)
    return during_post_figures(during, first_records)


def during_post_figures(
    during: list[tuple[str, Answer]], first_records: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The OTPs sent while the batch was being stored: their slowest POST -> 201 and 201 -> Meta."""
    if not during:
        return {"count": 0}
    to_201 = [1000 * (answer.answered - answer.started) for _, answer in during]
    to_meta = [
        1000 * (float(first_records[answer.body["id"]]["received_monotonic"]) - answer.answered)
        for _, answer in during
        if answer.body["id"] in first_records
    ]
    return {
        "count": len(during),
        "max_post_to_201_ms": round(max(to_201), 1),
        "max_201_to_upstream_ms": round(max(to_meta), 1) if to_meta else None,
    }


def single_figures(
    single: tuple[str, Answer], run_records: list[dict[str, Any]], bulk_ids: dict[str, str]
) -> dict[str, Any]:
    """The mid-batch OTP: from its 201 to the simulator, and the bulk sends that went before it."""
    _, answer = single
    message_id = answer.body["id"]
    mine = [r for r in run_records if r["biz_opaque_callback_data"] == message_id]
    if not mine:
        return {"message_id": message_id, "arrived": False}
    arrived = float(mine[0]["received_monotonic"])
    bulk_times = [
        float(r["received_monotonic"]) for r in run_records if r["biz_opaque_callback_data"] in bulk_ids
    ]
    return {
        "message_id": message_id,
        "arrived": True,
        "post_to_201_ms": round(1000 * (answer.answered - answer.started), 1),
        "post_to_upstream_ms": round(1000 * (arrived - answer.started), 1),
        "201_to_upstream_ms": round(1000 * (arrived - answer.answered), 1),
        "bulk_sent_before_its_post": sum(1 for t in bulk_times if t < answer.started),
        "bulk_sent_between_post_and_it": sum(1 for t in bulk_times if answer.started <= t < arrived),
        "bulk_sent_after_it": sum(1 for t in bulk_times if t > arrived),
    }


# --------------------------------------------------------------------------- one backend and rate


def warm_up(stack: GatewayStack, count: int) -> None:
    """Single sends: the lane starts and the HTTP connections open before anything is measured."""
    if count < 1:
        return
    base = stack.upstream_total()
    for _ in range(count):
        send_single(stack)
    reached, _ = stack.wait_upstream(base + count, timeout=30.0)
    if not reached:
        raise RuntimeError("the warm-up sends did not all reach the simulator")


def measure(settings: Settings, backend: str, rate: int, url: str | None, db_name: str | None) -> list[Any]:
    extra_env = {}
    if settings.receipt_margin is not None:
        extra_env["WAGATE_UPSTREAM_RECEIPT_MARGIN_SECONDS"] = str(settings.receipt_margin)
    split = settings.split_worker and url is not None
    stack_options = {"extra_env": extra_env, "split_worker": split}
    with GatewayStack(database_url=url, messages_per_second=rate, **stack_options) as stack:
        if not settings.statuses:
            stack.sim_configure(auto_statuses=False)
        assert stack.server is not None
        # The worker too, when it runs apart (--split-worker): the gateway's processes are slower.
        limit_cpu([p.pid for p in (stack.server, stack.worker) if p is not None], settings.cpu_quota)
        log(f"{backend} at {rate}/s: gateway up in {stack.startup_seconds:.1f} s; warm-up")
        warm_up(stack, settings.warmup)
        if settings.sim_limit:
            stack.sim_configure(rate_limit_per_second=rate)
        if settings.sim_latency:
            stack.sim_configure(response_latency_seconds=settings.sim_latency)
        with contextlib.ExitStack() as cleanup:
            reader = cleanup.enter_context(outbox_reader(stack)) if settings.sim_limit else None
            ctx = Context(settings, backend, rate, stack, db_name, reader)
            return [run_once(ctx, run) for run in range(1, settings.repeat + 1)]


def run_backend(settings: Settings, backend: str) -> list[Any] | None:
    runs: list[Any] = []
    if backend == "postgresql" and not postgres_available():
        log("postgresql: nothing answers at 127.0.0.1:5432 as user postgres; skipped")
        return None
    for rate in settings.rates:
        if backend == "sqlite":
            runs += measure(settings, backend, rate, None, None)
            continue
        with throwaway_postgres_database() as (url, name):
            log(f"postgresql: throwaway database {name}")
            runs += measure(settings, backend, rate, url, name)
    return runs


# --------------------------------------------------------------------------- the report


def _f(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _verdict(run: dict[str, Any]) -> str:
    misses = [what for what, met in (("rate", run["rate_met"]), ("window", run["window_met"])) if not met]
    return "yes" if not misses else "no (" + ", ".join(misses) + ")"


def _meanwhile(figures: dict[str, Any]) -> str:
    if not figures.get("count"):
        return "-"
    return (
        f"{figures['count']}, {_f(figures['max_post_to_201_ms'])} / {_f(figures['max_201_to_upstream_ms'])}"
    )


def report(results: dict[str, Any]) -> str:
    s = results["settings"]
    lines = [
        "",
        f"bulk pacing benchmark, {results['date']}, {CPU_COUNT} CPUs, {s['batches']} batch(es) of "
        f"{s['recipients']} per run, single OTP mid-batch: {'yes' if s['single'] else 'no'}, simulator "
        f"limit: {'= channel rate' if s['sim_limit'] else 'off'}, simulator latency: {s['sim_latency']:g} s, "
        f"receipt margin: {'none' if s['receipt_margin'] is None else s['receipt_margin']}, "
        f"PostgreSQL worker apart: {'yes' if s['split_worker'] else 'no'}, "
        "status webhooks: "
        f"{'on' if s['statuses'] else 'off'}",
        "",
        "| backend | limit/s | run | POST->202 ms | 202->1st send ms | sends/s | middle 80 %/s | % of limit "
        "| max in 1 s | longest gap ms | met? | 202->completed s | OTP 201->upstream ms | bulk ahead of OTP "
        "| OTPs while stored: n, max POST->201 / 201->upstream ms | 130429 | lost | dup | serve CPU% "
        "| sim CPU% | db CPU% | others% | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in results["runs"]:
        sp = run.get("spacing", {})
        single = run.get("single", {})
        cpu = run["cpu"]
        first = run["batches"][0]
        to_202 = max(b["post_to_202_ms"] for b in run["batches"])
        completed = max(b["202_to_completed_s"] for b in run["batches"])
        lines.append(
            f"| {run['backend']} | {run['rate']} | {run['run']} | {_f(to_202)} "
            f"| {_f(run.get('202_to_first_send_ms'))} | {_f(sp.get('per_second'))} "
            f"| {_f(sp.get('middle_80pct_per_second'))} | {_f(sp.get('pct_of_limit'), 2)} "
            f"| {_f(sp.get('max_in_any_1s_window'))} | {_f(sp.get('longest_gap_ms'))} | {_verdict(run)} "
            f"| {_f(completed, 3) if first['status'] == 'completed' else 'not completed'} "
            f"| {_f(single.get('201_to_upstream_ms'))} | {_f(single.get('bulk_sent_between_post_and_it'))} "
            f"| {_meanwhile(run.get('during_post', {}))} | {_f(run['throttled_sends'])} "
            f"| {run['checks']['lost']} | {run['checks']['sent_twice']} "
            f"| {_f(cpu.get('server_pct'))} | {_f(cpu.get('simulator_pct'))} | {_f(cpu.get('postgres_pct'))} "
            f"| {_f(cpu.get('other_pct'))} | {_f(run['peak_rss_mb'])} |"
        )
    lines += [
        "",
        "sends/s: (n - 1) / (last - first) over each message's first send in the run (the batch and the",
        "single OTP) as the simulator received them; middle 80 %: the same between the sends at 10 % and",
        f"90 %. % of limit: sends/s over the limit. The limiter paces at rate per {LIMITER_WINDOW} s,",
        f"so its steady ceiling is {100 / LIMITER_WINDOW:.1f} %; a run can start with a burst of up to 5",
        "slices (rate / 4) saved up while idle, which lifts a short run above 100 %. max in 1 s: the most",
        "sends, repeats included, in any [t, t + 1 s) at the simulator (its own 130429 rule). met?: >= 98 %",
        "of the limit and max in 1 s <= the limit. 202->completed: from the 202 to the batch's",
        "completed_at. OTP 201->upstream: from the single's 201 to its arrival at the simulator (< 0 when",
        "it arrived before the 201 was read); bulk ahead: bulk sends that arrived between its POST and it.",
        "OTPs while stored: single OTPs posted one after another while another batch's POST (after the run)",
        "was under way, the slowest of their POST -> 201 and of their 201 -> arrival at the simulator.",
        "130429: outbox rows refused by the simulator's limit (--sim-limit only). dup: messages sent more",
        "than once. CPU% is of ONE core from the POST to the last send; others = the rest of the machine",
        "meanwhile. peak RSS: serve's VmHWM.",
    ]
    for run in results["runs"]:
        sp = run.get("spacing", {})
        single = run.get("single", {})
        each_second = " ".join(str(c) for c in sp.get("sends_each_second", []))
        lines.append(
            f"{run['backend']} {run['rate']}/s run {run['run']}: sends in each second from the first: "
            f"{each_second}; max in a {LIMITER_WINDOW} s window {_f(sp.get('max_in_any_limiter_window'))}; "
            f"middle 80 % = {_f(sp.get('middle_pct_of_limit'), 2)} %; "
            f"OTP: {single.get('bulk_sent_before_its_post', '-')} bulk sends before its POST, "
            f"{single.get('bulk_sent_after_it', '-')} after it; counts {run['batches'][0]['counts']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    terminated = sigterm_as_interrupt()
    results: dict[str, Any] = {
        "date": utc_stamp(),
        "settings": {
            "backends": settings.backends,
            "rates": settings.rates,
            "recipients": settings.recipients,
            "batches": settings.batches,
            "repeat": settings.repeat,
            "single": settings.single,
            "single_at": settings.single_at,
            "sim_limit": settings.sim_limit,
            "sim_latency": settings.sim_latency,
            "receipt_margin": settings.receipt_margin,
            "split_worker": settings.split_worker,
            "statuses": settings.statuses,
            "warmup": settings.warmup,
        },
        "runs": [],
    }
    try:
        for backend in settings.backends:
            runs = run_backend(settings, backend)
            if runs is not None:
                results["runs"] += runs
    except KeyboardInterrupt:
        log("interrupted; servers stopped, temporary files and databases removed")
        return 143 if terminated() else 130
    print(report(results))
    if settings.json is not None:
        settings.json.write_text(json.dumps(no_nan(results), indent=2, default=str) + "\n")
        log(f"wrote {settings.json}")
    failed = [f"{r['backend']} {r['rate']}/s run {r['run']}" for r in results["runs"] if not r["ok"]]
    if failed:
        log(f"messages lost or sent twice in: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
