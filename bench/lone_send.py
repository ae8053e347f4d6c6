"""What one message costs when it is alone: single sends one at a time, each after the last one's 201.

At a low rate nothing is shared: the send's request, its transaction, the lane's call to Meta and the
transaction that records the call's result each pay their fixed costs for one message. That is the
cost the latency at 100 msg/s and a small machine's capacity are made of (docs/performance.md, "A
message alone"). This starts `wagate serve` with the simulator (bench/stack.py; no status webhooks),
sends `--count` OTPs one after another with `--gap` ms between a 201 and the next send, and prints
the accept latency (POST to 201, as the client sees it) and the server's CPU per send (user and
system, from /proc).

    .venv/bin/python bench/lone_send.py [--count 300] [--gap 50,10] [--databases sqlite,postgresql]
        [--cpu-quota CORES]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from common import (
    add_cpu_quota_option,
    add_databases_option,
    database_for,
    databases_of,
    limit_cpu,
    percentile,
    proc_cpu_seconds,
)
from loadgen import RawHttpClient
from stack import GatewayStack


async def one_at_a_time(stack: GatewayStack, count: int, gap_seconds: float) -> dict[str, float]:
    assert stack.server is not None
    client = RawHttpClient(stack.messages_url, stack.headers, max_connections=1, timeout=10.0)
    try:
        for _ in range(20):  # warm-up: caches, the connection, the lane
            await client.post(stack.otp_body())
        await asyncio.sleep(1.0)
        latencies: list[float] = []
        cpu_before = proc_cpu_seconds(stack.server.pid) or 0.0
        for _ in range(count):
            started = time.perf_counter()
            status, body = await client.post(stack.otp_body())
            latencies.append(time.perf_counter() - started)
            if status != 201:
                raise RuntimeError(f"a send was answered {status}: {body[:200]!r}")
            await asyncio.sleep(gap_seconds)
        await asyncio.sleep(0.5)  # the last send's call to Meta and its recorded result
        cpu = (proc_cpu_seconds(stack.server.pid) or 0.0) - cpu_before
    finally:
        await client.close()
    return {
        "gap_ms": gap_seconds * 1000,
        "accept_p50_ms": percentile(latencies, 50) * 1000,
        "accept_p90_ms": percentile(latencies, 90) * 1000,
        "accept_p99_ms": percentile(latencies, 99) * 1000,
        "server_cpu_ms_per_send": cpu / count * 1000,
    }


def run(args: argparse.Namespace, database: str, database_url: str | None) -> None:
    with GatewayStack(database_url=database_url, messages_per_second=1000) as stack:
        assert stack.server is not None
        stack.sim_configure(auto_statuses=False)
        limit_cpu([stack.server.pid], args.cpu_quota)
        for gap in args.gap:
            figures = asyncio.run(one_at_a_time(stack, args.count, gap / 1000))
            print(
                f"{database}, gap {figures['gap_ms']:4.0f} ms: accept p50 {figures['accept_p50_ms']:.2f}"
                f" p90 {figures['accept_p90_ms']:.2f} p99 {figures['accept_p99_ms']:.2f} ms;"
                f" server CPU {figures['server_cpu_ms_per_send']:.2f} ms per send",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=300, help="sends per gap")
    parser.add_argument(
        "--gap",
        type=lambda text: [float(part) for part in text.split(",")],
        default=[50.0, 10.0],
        help="ms between a 201 and the next send, comma-separated (one run each)",
    )
    add_databases_option(parser)
    add_cpu_quota_option(parser, "`wagate serve`")
    args = parser.parse_args()
    for database in databases_of(parser, args.databases):
        with database_for(database) as place:
            if place is not None:
                run(args, database, place[0])


if __name__ == "__main__":
    main()
