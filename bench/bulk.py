"""Bulk pacing against DESIGN.md's target: "bulk of 1000 at a channel limit of 80/s and 1000/s: >= 98 %
of the limit, never above it in any 1 s window", on SQLite and PostgreSQL.

For each database and each rate:
1. the gateway (bench/stack.py: simulator in its own process, `wagate migrate`, `wagate provision` of
   one channel whose `messages_per_second` is the rate, `wagate serve`); a few single sends warm it up
   (the channel's lane starts, connections open), then a pause empties the limiter's window;
2. `POST .../whatsapp/bulk_messages` of N distinct valid numbers (template otp_code) with the
   administrator key: the time to its 202;
3. unless --no-single, one single OTP (`POST .../whatsapp/messages`) mid-batch: from its 201 to its
   arrival at the simulator, and how many bulk sends arrived in between (singles go before bulk);
4. a wait until the simulator has every send and `GET .../bulk_messages/{batch_id}` says completed;
5. from the simulator's log (its CLOCK_MONOTONIC at receipt, the same clock as this process's): the
   sends per second from the first send of the run to the last, and between the 10 % and 90 % ones;
   the most sends in any sliding window [t, t + 1 s), counted with the simulator's own function (the
   rule behind its 130429); 202 -> completed from the batch's `completed_at`.

The simulator's own limit (`rate_limit_per_second`) is off, so every send the gateway makes is
recorded and the window figure is what the gateway really did.

Exits 1 when a message was lost or sent twice; rates and windows are findings, reported as met? yes/no.

    .venv/bin/python bench/bulk.py [--rates 80,1000] [--databases sqlite,postgresql] [--repeat 2]
        [--recipients 1000] [--no-single] [--json out.json] [--py-spy DIR]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import math
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
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
    cpu_snapshot,
    cpu_usage,
    database_for,
    databases_of,
    fmt,
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
from stack import GatewayStack, next_phone_number

from wagate.simulator.send_log import RATE_WINDOW_SECONDS, max_in_window

TARGET_SHARE = 0.98  # DESIGN.md, "Targets": >= 98 % of the limit
# src/wagate/outbox/limiter.py: the gateway's pace (PACE), so its steady ceiling is rate / 1.01; its
# promise is kept over 1 s windows, each send counted from Meta's answer.
LIMITER_WINDOW = 1.01
OTP_TEMPLATE = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
SINGLE_AT = 0.4  # the single OTP goes out at this share of the batch's ideal duration after the 202
WARMUP_SENDS = 5  # single sends before the first run
RUN_TIMEOUT = 600.0  # the longest wait for one run's sends
STALL_SECONDS = 90.0  # no new send for this long: stop waiting (a throttled channel pauses up to 60 s)
# The longest wait for `completed` once every send arrived: an in_flight row is released and sent
# again after upstream timeout + grace = 75 s by default; this must outlast that.
COMPLETE_TIMEOUT = 100.0
STUCK_AFTER = 15.0  # stop waiting for `completed` when the batch has shown 0 pending for this long
POLL_SECONDS = 0.1
CPU_GROUPS = ("server", "simulator", "postgres", "other")  # the report's CPU columns


class Settings(argparse.Namespace):
    databases: list[str]
    rates: list[int]
    recipients: int
    batches: int
    repeat: int
    single: bool
    sim_latency: float
    receipt_margin: float | None
    quiet_wait: float
    quiet_threshold: float
    json: Path | None
    py_spy: Path | None
    cpu_quota: float | None


def parse_args(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(
        description="Bulk pacing benchmark.", formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    add_databases_option(parser)
    parser.add_argument("--rates", default="80,1000", help="channel limits (messages_per_second) to run")
    parser.add_argument("--recipients", type=int, default=1000, help="numbers per batch (2..1000)")
    parser.add_argument(
        "--batches", type=int, default=1, help="batches posted back to back per run (the target is about 1)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="measured runs per database and rate")
    parser.add_argument(
        "--no-single", dest="single", action="store_false", help="no single OTP sent mid-batch"
    )
    parser.add_argument(
        "--sim-latency",
        type=float,
        default=0.0,
        help="the simulator answers each send this many seconds after it was received (the real Cloud "
        "API takes a few hundred milliseconds)",
    )
    parser.add_argument(
        "--receipt-margin",
        type=float,
        default=None,
        help="the gateway's WAGATE_UPSTREAM_RECEIPT_MARGIN_SECONDS (unset: each send counts from its answer)",
    )
    add_quiet_options(parser, wait=30.0)
    add_cpu_quota_option(parser, "`wagate serve`")
    add_json_option(parser)
    add_py_spy_option(parser, "from the 202 to the batch's last send")
    settings = parser.parse_args(argv, namespace=Settings())
    settings.databases = databases_of(parser, str(settings.databases))
    try:
        settings.rates = [int(part) for part in str(settings.rates).split(",") if part.strip()]
    except ValueError:
        parser.error("--rates takes comma-separated whole numbers, e.g. 80,1000")
    if not settings.rates or min(settings.rates) < 1:
        parser.error("--rates needs at least one rate, each at least 1")
    if not 2 <= settings.recipients <= 1000:
        parser.error("--recipients must be 2..1000 (API.md section 6 allows at most 1000)")
    if settings.batches < 1 or settings.repeat < 1:
        parser.error("--batches and --repeat must be at least 1")
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


def send_single(stack: GatewayStack) -> tuple[str, Answer]:
    number = next_phone_number()
    body = {"channel_id": stack.channel_id, "phone_number": number, "template": OTP_TEMPLATE}
    answer = api(stack, "POST", f"/v1/accounts/{stack.account_id}/whatsapp/messages", body)
    if answer.status != 201:
        raise RuntimeError(f"a single send answered {answer.status}: {answer.body}")
    return number, answer


def wait_batches_completed(stack: GatewayStack, batch_ids: list[str]) -> tuple[list[dict[str, Any]], float]:
    """GET each batch until it says completed; returns the last answers and the seconds waited.

    Gives up after COMPLETE_TIMEOUT, or once every unfinished batch has shown no pending recipient for
    STUCK_AFTER seconds: nothing is left to send, so nothing will complete it any more.
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
        if not unfinished or now - start > COMPLETE_TIMEOUT:
            break
        if all(v["counts"]["pending"] == 0 for v in unfinished):
            idle_since = idle_since or now
            if now - idle_since > STUCK_AFTER:
                break
        else:
            idle_since = None
        time.sleep(0.2)
    return [views[b] for b in batch_ids], round(time.monotonic() - start, 1)


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


# --------------------------------------------------------------------------- one run


@dataclass
class Context:
    settings: Settings
    database: str
    rate: int
    stack: GatewayStack
    db_name: str | None


def cpu_groups(ctx: Context) -> dict[str, list[int]]:
    assert ctx.stack.server is not None and ctx.stack.sim is not None
    groups = {"server": [ctx.stack.server.pid], "simulator": [ctx.stack.sim.pid]}
    if ctx.db_name is not None:
        groups["postgres"] = postgres_backend_pids(ctx.db_name)
    return groups


def prepare_run(ctx: Context) -> dict[str, Any]:
    """Status webhooks of earlier sends delivered, the machine quiet, the limiter's window empty."""
    stack, settings = ctx.stack, ctx.settings
    stack.wait_webhooks_idle(timeout=60.0)
    assert stack.server is not None and stack.sim is not None
    machine = quiet_machine(
        [stack.server.pid, stack.sim.pid], wait=settings.quiet_wait, threshold=settings.quiet_threshold
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
    name = f"{ctx.database}-{rate}-run{run}"
    figures: dict[str, Any] = {"backend": ctx.database, "rate": rate, "run": run}
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

    single: tuple[str, Answer] | None = None
    single_due = posts[0].answered + SINGLE_AT * ideal
    deadline = posts[0].started + RUN_TIMEOUT
    total, last_total, last_progress = base, -1, time.monotonic()
    with py_spy(stack.server.pid, settings.py_spy, name, max(2.0, ideal + 1.0)):
        while True:
            now = time.monotonic()
            if settings.single and single is None and now >= single_due:
                single = send_single(stack)
            total = stack.upstream_total()
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
    views, figures["completion_wait_s"] = wait_batches_completed(stack, [p.body["batch_id"] for p in posts])

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
    if single is not None:
        figures["single"] = single_figures(single, run_records, bulk_ids)
    figures["peak_rss_mb"] = peak_rss_mb(stack.server.pid)
    spacing = figures.get("spacing", {})
    figures["rate_met"] = spacing.get("pct_of_limit", 0.0) >= 100 * TARGET_SHARE
    figures["window_met"] = spacing.get("max_in_any_1s_window", math.inf) <= rate
    figures["ok"] = figures["checks"]["lost"] == 0 and figures["checks"]["sent_twice"] == 0
    return figures


# --------------------------------------------------------------------------- one database and rate


def warm_up(stack: GatewayStack) -> None:
    """Single sends: the lane starts and the HTTP connections open before anything is measured."""
    base = stack.upstream_total()
    for _ in range(WARMUP_SENDS):
        send_single(stack)
    reached, _ = stack.wait_upstream(base + WARMUP_SENDS, timeout=30.0)
    if not reached:
        raise RuntimeError("the warm-up sends did not all reach the simulator")


def measure(settings: Settings, database: str, rate: int, url: str | None, db_name: str | None) -> list[Any]:
    extra_env = {}
    if settings.receipt_margin is not None:
        extra_env["WAGATE_UPSTREAM_RECEIPT_MARGIN_SECONDS"] = str(settings.receipt_margin)
    with GatewayStack(database_url=url, messages_per_second=rate, extra_env=extra_env) as stack:
        assert stack.server is not None
        limit_cpu([stack.server.pid], settings.cpu_quota)
        log(f"{database} at {rate}/s: gateway up in {stack.startup_seconds:.1f} s; warm-up")
        warm_up(stack)
        if settings.sim_latency:
            stack.sim_configure(response_latency_seconds=settings.sim_latency)
        ctx = Context(settings, database, rate, stack, db_name)
        return [run_once(ctx, run) for run in range(1, settings.repeat + 1)]


# --------------------------------------------------------------------------- the report


def _verdict(run: dict[str, Any]) -> str:
    misses = [what for what, met in (("rate", run["rate_met"]), ("window", run["window_met"])) if not met]
    return "yes" if not misses else "no (" + ", ".join(misses) + ")"


def report(results: dict[str, Any]) -> str:
    s = results["settings"]
    lines = [
        "",
        f"bulk pacing benchmark, {results['date']}, {CPU_COUNT} CPUs, {s['batches']} batch(es) of "
        f"{s['recipients']} per run, single OTP mid-batch: {'yes' if s['single'] else 'no'}, "
        f"simulator latency: {s['sim_latency']:g} s, "
        f"receipt margin: {'none' if s['receipt_margin'] is None else s['receipt_margin']}",
        "",
        "| database | limit/s | run | POST->202 ms | 202->1st send ms | sends/s | middle 80 %/s | % of limit "
        "| max in 1 s | longest gap ms | met? | 202->completed s | OTP 201->upstream ms | bulk ahead of OTP "
        "| lost | dup | serve CPU% | sim CPU% | db CPU% | others% | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in results["runs"]:
        sp = run.get("spacing", {})
        single = run.get("single", {})
        cpu = run["cpu"]
        first = run["batches"][0]
        to_202 = max(b["post_to_202_ms"] for b in run["batches"])
        completed = max(b["202_to_completed_s"] for b in run["batches"])
        lines.append(
            f"| {run['backend']} | {run['rate']} | {run['run']} | {fmt(to_202)} "
            f"| {fmt(run.get('202_to_first_send_ms'))} | {fmt(sp.get('per_second'))} "
            f"| {fmt(sp.get('middle_80pct_per_second'))} | {fmt(sp.get('pct_of_limit'), 2)} "
            f"| {fmt(sp.get('max_in_any_1s_window'))} | {fmt(sp.get('longest_gap_ms'))} | {_verdict(run)} "
            f"| {fmt(completed, 3) if first['status'] == 'completed' else 'not completed'} "
            f"| {fmt(single.get('201_to_upstream_ms'))} | {fmt(single.get('bulk_sent_between_post_and_it'))} "
            f"| {run['checks']['lost']} | {run['checks']['sent_twice']} "
            + "".join(f"| {fmt(cpu.get(f'{group}_pct'))} " for group in CPU_GROUPS)
            + f"| {fmt(run['peak_rss_mb'])} |"
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
        "dup: messages sent more than once. CPU% is of ONE core from the POST to the last send; others =",
        "the rest of the machine meanwhile. peak RSS: serve's VmHWM.",
    ]
    for run in results["runs"]:
        sp = run.get("spacing", {})
        single = run.get("single", {})
        each_second = " ".join(str(c) for c in sp.get("sends_each_second", []))
        lines.append(
            f"{run['backend']} {run['rate']}/s run {run['run']}: sends in each second from the first: "
            f"{each_second}; max in a {LIMITER_WINDOW} s window {fmt(sp.get('max_in_any_limiter_window'))}; "
            f"middle 80 % = {fmt(sp.get('middle_pct_of_limit'), 2)} %; "
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
            "databases": settings.databases,
            "rates": settings.rates,
            "recipients": settings.recipients,
            "batches": settings.batches,
            "repeat": settings.repeat,
            "single": settings.single,
            "sim_latency": settings.sim_latency,
            "receipt_margin": settings.receipt_margin,
        },
        "runs": [],
    }
    try:
        for database in settings.databases:
            for rate in settings.rates:
                with database_for(database) as place:
                    if place is not None:
                        results["runs"] += measure(settings, database, rate, *place)
    except KeyboardInterrupt:
        log("interrupted; servers stopped, temporary files and databases removed")
        return 143 if terminated() else 130
    print(report(results))
    write_json(settings.json, results)
    failed = [f"{r['backend']} {r['rate']}/s run {r['run']}" for r in results["runs"] if not r["ok"]]
    if failed:
        log(f"messages lost or sent twice in: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
