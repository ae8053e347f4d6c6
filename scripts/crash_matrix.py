"""The crash matrix, full run: SIGKILLs at random moments across runs of 1,000 messages (docs/reliability.md).

For each scenario (default: `serve` on SQLite, `serve` on PostgreSQL, a `worker` on PostgreSQL beside
two `serve --no-dispatcher` and a second worker): a fresh database, the simulator in a process of its
own (status webhooks back to the gateway), an account webhook for message and batch events delivered
to a receiver in this process, then `--runs` runs of `--messages` messages (single sends and one batch
of `--batch`), with `--kills` SIGKILLs spread over the runs at moments drawn from `--seed`. After each
run everything settles and is counted (tests/support/crash_matrix.py says what each column means).
Prints the seed first and a table last; exits 1 on any loss, double send, lost or doubled event,
failure or row left stuck.

    .venv/bin/python scripts/crash_matrix.py [--seed N] [--scenarios serve-sqlite,...] [--runs 2]
        [--kills 20] [--messages 1000] [--batch 400] [--report out.json]

PostgreSQL comes from WAGATE_TEST_POSTGRES_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/postgres),
where a database of its own is created for each scenario and dropped after it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import support.crash_matrix as engine  # noqa: E402 - the tests' machinery, from tests/


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (printed; default: a new one)")
    parser.add_argument(
        "--scenarios",
        default="serve-sqlite,serve-postgresql,worker-postgresql",
        help=f"comma-separated, of: {', '.join(engine.SCENARIOS)}",
    )
    parser.add_argument("--runs", type=int, default=2, help="runs per scenario")
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs per scenario, spread over its runs")
    parser.add_argument("--messages", type=int, default=1000, help="messages per run (singles + the batch)")
    parser.add_argument("--batch", type=int, default=400, help="recipients of the run's batch")
    parser.add_argument("--rate", type=float, default=80.0, help="single sends offered per second")
    parser.add_argument("--channel-rate", type=int, default=100, help="the channel's messages_per_second")
    parser.add_argument(
        "--settle",
        type=float,
        default=180.0,
        help="seconds a run may take to settle (a claim of a killed process can hold work for its lease)",
    )
    parser.add_argument("--work", type=Path, default=None, help="directory for databases and logs")
    parser.add_argument("--report", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**9)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],  # noqa: S607 - git from the PATH, as a developer runs it
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    started = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    machine = f"{platform.node()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the start"
    print(f"crash matrix: seed {seed}, commit {commit}, {started.isoformat()}, {machine}", flush=True)
    spec = engine.RunSpec(
        messages=args.messages,
        batch=args.batch,
        single_rate=args.rate,
        channel_rate=args.channel_rate,
        settle_timeout=args.settle,
    )
    work = args.work or Path(tempfile.mkdtemp(prefix="crash-matrix-"))
    print(f"logs and databases in {work}", flush=True)
    results: list[engine.RunResult] = []
    began = time.monotonic()
    for name in args.scenarios.split(","):
        scenario = engine.SCENARIOS[name.strip()]
        results += engine.run_scenario(
            scenario,
            args.runs,
            spec,
            seed,
            work / scenario.name,
            kills=args.kills,
            log=lambda line: print(line, flush=True),
        )
    minutes = (time.monotonic() - began) / 60
    print(
        f"\ncrash matrix: seed {seed}, commit {commit}, {started.isoformat()}, {minutes:.0f} min, {machine}"
    )
    print(engine.table(results))
    problems = [(r, p) for r in results for p in r.problems()]
    for result, problem in problems:
        print(f"PROBLEM {result.scenario} run {result.run}: {problem}; samples {result.samples}")
    if args.report:
        args.report.write_text(
            json.dumps(
                {
                    "seed": seed,
                    "commit": commit,
                    "started": started.isoformat(),
                    "machine": machine,
                    "minutes": round(minutes, 1),
                    "markdown": engine.table(results, markdown=True),
                    "runs": [dataclasses.asdict(r) for r in results],
                },
                indent=2,
            )
        )
    print("FAILED" if problems else "OK: nothing lost, nothing sent twice, no event lost")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
