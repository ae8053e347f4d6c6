"""Meta status webhooks applied per second (DESIGN.md target: >= 3000/s), on SQLite and PostgreSQL.

For each database:
1. the gateway (bench/stack.py: simulator, migrate, provision, `wagate serve`) with the simulator's own
   status webhooks off, so that nothing but this bench posts statuses;
2. N messages sent through the API (bulk batches of 1000 on a 1000/s channel) and a wait until Meta
   (the simulator) has every one and the gateway has recorded every wamid: the state a status finds
   in production, where Meta's answer comes long before its first status.
   On PostgreSQL the database is then analyzed (`ANALYZE`), as autovacuum does in a running deployment
   within its minute: the statistics of a table that grew from empty in seconds would otherwise be
   those of an empty table;
3. Meta's three statuses of every message (`sent` with its conversation and pricing, `delivered`,
   `read`), one status per signed POST as Meta sends them under load, built here in Meta's format
   from the simulator's log (wamid, recipient, user id, our message id in `biz_opaque_callback_data`)
   and posted to `/webhooks/whatsapp` over `--concurrency` keep-alive connections: all `sent` first,
   then all `delivered`, then all `read`;
4. from the first POST until every message reads `read` in the database and no stored webhook is
   left: statuses applied per second (3 N over that time), the POSTs' own rate and latency, and the
   CPU the gateway (and PostgreSQL) spent per status.

`--split-worker` (PostgreSQL only): `wagate serve --no-dispatcher` receives and stores the webhooks
and a `wagate worker` beside it applies them, each with a core of its own (issue 18: what one more
process adds); the gateway's CPU per status is then both processes'.
`--cpu-quota CORES`: while the statuses are posted, `wagate serve` (and the worker) run on at most
CORES of CPU, as on a slower machine (the bare endpoint of `send_path.py --cpu-quota` with the same
CORES says how much slower).

Exits 1 when a POST was refused or a status was not applied; a rate below the target is a finding.

    .venv/bin/python bench/statuses.py [--messages 3000] [--databases sqlite,postgresql] [--json F]
        [--py-spy DIR] [--split-worker] [--cpu-quota CORES]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import time
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
    cpu_snapshot,
    cpu_usage,
    database_for,
    databases_of,
    http_json,
    latency_summary_ms,
    limit_cpu,
    log,
    postgres_backend_pids,
    py_spy,
    quiet_machine,
    utc_stamp,
    write_json,
)
from loadgen import RawHttpClient, install_uvloop
from sqlalchemy import text
from stack import BENCH_CHANNEL, GatewayStack, next_phone_number

TARGET_PER_SECOND = 3000
STATUSES = ("sent", "delivered", "read")
BULK_MAX = 1000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=3000, help="messages, three statuses each")
    add_databases_option(parser)
    parser.add_argument("--concurrency", type=int, default=64, help="keep-alive connections posting statuses")
    add_json_option(parser)
    add_py_spy_option(parser, "while the statuses are posted and applied")
    add_quiet_options(parser, wait=60.0)
    parser.add_argument(
        "--split-worker",
        action="store_true",
        help="PostgreSQL: `serve --no-dispatcher` receives, a `wagate worker` applies",
    )
    add_cpu_quota_option(parser, "the gateway's processes while the statuses are posted")
    settings = parser.parse_args(argv)
    settings.databases = databases_of(parser, settings.databases)
    return settings


def send_messages(stack: GatewayStack, count: int) -> None:
    """`count` OTPs in bulk batches (each under the channel's backlog limit), all accepted."""
    url = f"{stack.url}/v1/accounts/{stack.account_id}/whatsapp/bulk_messages"
    left = count
    while left > 0:
        numbers = [next_phone_number() for _ in range(min(BULK_MAX, left))]
        body = {
            "channel_id": stack.channel_id,
            "template": {"name": "otp_code", "language": "en", "parameters": ["424242"]},
            "phone_numbers": numbers,
        }
        http_json("POST", url, body, headers={"Authorization": f"Bearer {stack.token}"})
        left -= len(numbers)
    reached, waited = stack.wait_upstream(count, timeout=120.0)
    if not reached:
        raise RuntimeError(
            f"the simulator has {stack.upstream_total()} of {count} sends after {waited:.0f} s"
        )


def status_body(entry: dict[str, Any], status: str, timestamp: int) -> bytes:
    """Meta's webhook for one status of one message (docs/meta-formats.md), as the simulator sends it."""
    item: dict[str, Any] = {
        "id": entry["wamid"],
        "status": status,
        "timestamp": str(timestamp),
        "recipient_id": entry["to"].lstrip("+"),
        "recipient_user_id": entry["user_id"],
        "biz_opaque_callback_data": entry["biz_opaque_callback_data"],
    }
    if status in ("sent", "delivered"):
        item["conversation"] = {
            "id": hashlib.sha256(f"{entry['to']}/utility".encode()).hexdigest()[:32],
            "origin": {"type": "utility"},
        }
        if status == "sent":
            item["conversation"]["expiration_timestamp"] = str(timestamp + 24 * 3600)
        item["pricing"] = {"billable": True, "pricing_model": "PMP", "type": "regular", "category": "utility"}
    contact = {"wa_id": entry["to"].lstrip("+"), "user_id": entry["user_id"]}
    value = {
        "messaging_product": "whatsapp",
        "metadata": {
            "display_phone_number": BENCH_CHANNEL["display_phone_number"],
            "phone_number_id": BENCH_CHANNEL["phone_number_id"],
        },
        "contacts": [contact],
        "statuses": [item],
    }
    change = {"value": value, "field": "messages"}
    return orjson.dumps(
        {
            "object": "whatsapp_business_account",
            "entry": [{"id": BENCH_CHANNEL["waba_id"], "changes": [change]}],
        }
    )


def signed(body: bytes, app_secret: str) -> tuple[bytes, bytes]:
    signature = hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
    return body, b"X-Hub-Signature-256: sha256=%s\r\n" % signature.encode()


async def post_all(
    url: str, bodies: list[tuple[bytes, bytes]], concurrency: int
) -> tuple[list[float], list[int]]:
    """POST every body in order over `concurrency` connections; each POST's latency and status."""
    client = RawHttpClient(url, {"Content-Type": "application/json"}, concurrency, 30.0)
    queue = iter(bodies)
    latencies: list[float] = []
    statuses: list[int] = []

    async def worker() -> None:
        for body, head in queue:
            start = time.perf_counter()
            try:
                status, _ = await client.post(body, head)
            except Exception:  # counted as status 0
                status = 0
            latencies.append(time.perf_counter() - start)
            statuses.append(status)

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await client.close()
    return latencies, statuses


def applied(engine: Any, messages: int) -> tuple[int, int]:
    """(messages that read `read`, stored Meta webhooks not applied yet)."""
    with engine.connect() as conn:
        read = conn.scalar(text("SELECT count(*) FROM messages WHERE status = 'read'"))
        waiting = conn.scalar(text("SELECT count(*) FROM outbox WHERE kind = 'meta_webhook'"))
    return int(read or 0), int(waiting or 0)


def wait_recorded(engine: Any, count: int, timeout: float = 60.0) -> None:
    """Until the gateway has recorded the wamid of every message (Meta's answer, before any status)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            done = conn.scalar(text("SELECT count(*) FROM messages WHERE upstream_message_id IS NOT NULL"))
        if int(done or 0) >= count:
            return
        time.sleep(0.1)
    raise RuntimeError(f"the gateway recorded {done} of {count} wamids in {timeout:.0f} s")


def measure(
    settings: argparse.Namespace, backend: str, database_url: str | None, db_name: str | None
) -> dict:
    split = settings.split_worker and db_name is not None
    with GatewayStack(database_url=database_url, messages_per_second=1000, split_worker=split) as stack:
        assert stack.server is not None and stack.sim is not None and stack.database_url is not None
        stack.sim_configure(auto_statuses=False)
        engine = stack.sync_engine()
        try:
            count = settings.messages
            log(f"{backend}: sending {count} messages")
            send_messages(stack, count)
            wait_recorded(engine, count)
            if db_name is not None:
                analyze_postgres(db_name)
            entries = stack.upstream_messages()
            now = int(time.time())
            bodies = [
                signed(status_body(entry, status, now + step), stack.app_secret)
                for step, status in enumerate(STATUSES)
                for entry in entries
            ]
            pids = {"server": [stack.server.pid]}
            if stack.worker is not None:
                pids["worker"] = [stack.worker.pid]
            if db_name is not None:
                pids["postgres"] = postgres_backend_pids(db_name)
            machine = quiet_machine(
                [p for group in pids.values() for p in group] + [stack.sim.pid],
                wait=settings.quiet_wait,
                threshold=settings.quiet_threshold,
            )
            # Only the statuses are slowed: sending the messages before them is not what is measured.
            limit_cpu([*pids["server"], *pids.get("worker", [])], settings.cpu_quota)
            log(f"{backend}: posting {len(bodies)} statuses over {settings.concurrency} connections")
            before = cpu_snapshot([p for group in pids.values() for p in group])
            start = time.perf_counter()
            with py_spy(stack.server.pid, settings.py_spy, f"statuses-{backend}", 120.0):
                latencies, answers = asyncio.run(
                    post_all(f"{stack.url}/webhooks/whatsapp", bodies, settings.concurrency)
                )
                posted = time.perf_counter() - start
                read = waiting = 0
                deadline = time.monotonic() + 120.0
                while time.monotonic() < deadline:
                    read, waiting = applied(engine, count)
                    if read >= count and waiting == 0:
                        break
                    time.sleep(0.02)
                elapsed = time.perf_counter() - start
            after = cpu_snapshot([p for group in pids.values() for p in group])
        finally:
            engine.dispose()
        cpu = cpu_usage(before, after, pids)
        statuses = len(bodies)
        gateway_pct = cpu["server_pct"] + cpu.get("worker_pct", 0.0)
        figures: dict[str, Any] = {
            "backend": backend + (" (serve + worker)" if split else ""),
            "messages": count,
            "statuses": statuses,
            "refused_posts": sum(1 for a in answers if a != 200),
            "all_applied": read >= count and waiting == 0,
            "posted_per_second": round(statuses / posted, 1),
            "post_latency": latency_summary_ms(latencies),
            "applied_per_second": round(statuses / elapsed, 1),
            "seconds": round(elapsed, 2),
            # The gateway's processes together (with --split-worker, serve's and the worker's).
            "server_cpu_ms_per_status": round(gateway_pct / 100 * elapsed * 1000 / statuses, 3),
            # Of it, the event loop of `wagate serve` (the POST; the rest is its writer threads, and
            # with --split-worker the worker).
            "serve_loop_cpu_ms_per_status": round(
                cpu["server_main_pct"] / 100 * elapsed * 1000 / statuses, 3
            ),
            "cpu": cpu,
            "cpu_quota": settings.cpu_quota,
            "machine_before": machine,
        }
        if "postgres_pct" in cpu:
            figures["postgres_cpu_ms_per_status"] = round(
                cpu["postgres_pct"] / 100 * elapsed * 1000 / statuses, 3
            )
        return figures


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        "",
        f"{'status webhooks':<28}{'statuses':>9}{'posted/s':>10}{'applied/s':>10}{'target':>8}{'met':>5}"
        f"{'POST p99 ms':>12}{'srv ms/status':>14}{'of it loop':>11}{'db ms/status':>13}",
    ]
    for r in results:
        met = "yes" if r["applied_per_second"] >= TARGET_PER_SECOND and r["all_applied"] else "no"
        db = r.get("postgres_cpu_ms_per_status")
        lines.append(
            f"{r['backend']:<28}{r['statuses']:>9}{r['posted_per_second']:>10.0f}{r['applied_per_second']:>10.0f}"
            f"{TARGET_PER_SECOND:>8}{met:>5}{r['post_latency']['p99_ms']:>12.1f}{r['server_cpu_ms_per_status']:>14.3f}"
            f"{r['serve_loop_cpu_ms_per_status']:>11.3f}{db if db is not None else '-':>13}"
        )
    lines.append(
        "srv ms/status: the CPU of the gateway's processes a status; of it loop: that of `wagate serve`'s"
        " event loop (the POST), the rest being its writer threads (applying) and any worker."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    install_uvloop()
    results = []
    for database in settings.databases:
        with database_for(database) as place:
            if place is not None:
                results.append(measure(settings, database, *place))
    print(report(results))
    write_json(settings.json, {"date": utc_stamp(), "cpus": CPU_COUNT, "results": results})
    failed = [r["backend"] for r in results if r["refused_posts"] or not r["all_applied"]]
    if failed:
        log(f"statuses refused or not applied on: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
