"""CPU per message at a low, steady rate, with the API and the sends in processes of their own.

A deployment on PostgreSQL runs `wagate serve --no-dispatcher` beside `wagate worker`; at a steady
rate well below capacity each message's work is not shared with others in a batch, so its fixed
costs (a claim, a commit, a wake-up) show. This starts that layout (bench/stack.py, a throwaway
PostgreSQL database, the simulator sending Meta's statuses back), offers single OTP sends at `--rate`
for `--duration` seconds, and prints the CPU each process spent per message. `--py-spy PREFIX`
samples both (`PREFIX-api.txt`, `PREFIX-worker.txt`, for bench/layers.py).

    .venv/bin/python bench/low_rate.py [--rate 50] [--duration 10] [--py-spy /tmp/low]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time

from common import cpu_snapshot, cpu_usage, py_spy_command, throwaway_postgres_database
from loadgen import open_loop
from stack import GatewayStack


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=50.0, help="single sends per second")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds measured")
    parser.add_argument("--py-spy", help="sample both processes; profiles go to PREFIX-api.txt, -worker.txt")
    args = parser.parse_args()
    with (
        throwaway_postgres_database("wagate_low_") as (url, _),
        GatewayStack(url, split_worker=True) as stack,
    ):
        assert stack.server is not None and stack.worker is not None and stack.sim is not None

        def offer(seconds: float) -> int:
            result = asyncio.run(
                open_loop(
                    stack.messages_url,
                    make_body=stack.otp_body,
                    headers=stack.headers,
                    rate=args.rate,
                    duration=seconds,
                )
            )
            return len(result.ok)

        offer(2.0)  # warm-up: caches, connections, the lane
        time.sleep(1.0)
        spies = []
        if args.py_spy:
            spy = py_spy_command()
            if spy is None:
                sys.exit("py-spy is not installed (docs/performance.md)")
            for name, process in (("api", stack.server), ("worker", stack.worker)):
                argv = [spy, "record", "--gil", "-r", "250", "-f", "raw", "-d", str(int(args.duration))]
                argv += ["-o", f"{args.py_spy}-{name}.txt", "-p", str(process.pid)]
                spies.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        pids = {"api": [stack.server.pid], "worker": [stack.worker.pid], "simulator": [stack.sim.pid]}
        before = cpu_snapshot([p for group in pids.values() for p in group])
        accepted = offer(args.duration)
        stack.wait_webhooks_idle()  # the statuses of the last messages are part of their cost
        after = cpu_snapshot([p for group in pids.values() for p in group])
        for spy_process in spies:
            spy_process.wait()
    usage = cpu_usage(before, after, pids)
    seconds = after.wall - before.wall
    per_message = {
        name: round(usage[f"{name}_pct"] * 10 * seconds / max(accepted, 1), 2) for name in ("api", "worker")
    }
    print(
        json.dumps(
            {"rate": args.rate, "accepted": accepted, "cpu_pct": usage, "cpu_ms_per_message": per_message}
        )
    )
    print(
        f"{accepted} messages at {args.rate:g}/s: CPU per message api {per_message['api']} ms, "
        f"worker {per_message['worker']} ms (with Meta's three statuses each)"
    )


if __name__ == "__main__":
    main()
