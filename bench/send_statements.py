"""How many SQL statements and commits one accepted send costs, and what one statement costs.

A diagnostic beside send_path.py: the gateway and the simulator run in this process (each on its
own thread and event loop, as in the tests), so SQLAlchemy events on the gateway's engines can count
every statement. Messages are sent one at a time; the count covers everything the system does for
them (the request, the dispatcher's claim and record, the status webhooks and their application),
minus the dispatcher's idle polling, measured separately.

    .venv/bin/python bench/send_statements.py [--messages 200] [--databases sqlite,postgresql] [--json f]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import (
    fernet_key,
    http_json,
    postgres_available,
    sigterm_as_interrupt,
    throwaway_postgres_database,
)
from stack import BENCH_CHANNEL, next_phone_number, provision_spec

APP_SECRET = secrets.token_hex(16)


class StatementCounter:
    """Counts statements and commits on the gateway's engines (events run on the server's thread)."""

    def __init__(self) -> None:
        self.statements = 0
        self.commits = 0
        self._lock = threading.Lock()

    def attach(self, *engines: Any) -> None:
        from sqlalchemy import event

        for engine in {id(e): e for e in engines}.values():
            sync_engine = getattr(engine, "sync_engine", engine)  # the writer's engine is sync already
            event.listen(sync_engine, "before_cursor_execute", self._statement)
            event.listen(sync_engine, "commit", self._commit)

    def _statement(self, *_: Any, **__: Any) -> None:
        with self._lock:
            self.statements += 1

    def _commit(self, *_: Any) -> None:
        with self._lock:
            self.commits += 1

    def read(self) -> tuple[int, int]:
        with self._lock:
            return self.statements, self.commits


def measure(database_url: str, workdir: Path, messages: int, statuses: bool) -> dict[str, Any]:
    from wagate.api.app import create_app
    from wagate.core.config import Settings
    from wagate.core.migrate import migrate
    from wagate.ops.operations import run_provision
    from wagate.ops.provisioning import ProvisionFile
    from wagate.simulator.app import create_simulator_app
    from wagate.simulator.server import RunningServer
    from wagate.simulator.state import SimulatorConfig

    sim = RunningServer(create_simulator_app(SimulatorConfig(app_secret=APP_SECRET))).start()
    gateway: RunningServer | None = None
    try:
        http_json("POST", f"{sim.base_url}/_sim/channels", BENCH_CHANNEL)
        settings = Settings(
            database_url=database_url,
            graph_api_url=f"{sim.base_url}/v23.0",
            meta_app_secret=APP_SECRET,
            secret_key=fernet_key(),
            log_level="warning",
        )
        migrate(database_url)
        token = "wg_bench_" + secrets.token_urlsafe(24)
        provisioned = asyncio.run(
            run_provision(settings, ProvisionFile.model_validate(provision_spec(token, 1000)))
        )
        account = provisioned["accounts"][0]
        channel_id = account["channels"][0]["channel_id"]
        app = create_app(settings)
        gateway = RunningServer(app).start()
        http_json(
            "POST",
            f"{sim.base_url}/_sim/config",
            {"webhook_url": f"{gateway.base_url}/webhooks/whatsapp", "auto_statuses": statuses},
        )
        counter = StatementCounter()
        counter.attach(app.state.gateway.db.engine, app.state.gateway.db.write_engine)

        def upstream_total() -> int:
            stats = http_json("GET", f"{sim.base_url}/_sim/stats")
            channel = stats["phone_number_ids"].get(BENCH_CHANNEL["phone_number_id"])
            return int(channel["total"]) if channel else 0

        def settle(expected: int, timeout: float = 60.0) -> None:
            deadline = time.monotonic() + timeout
            while upstream_total() < expected and time.monotonic() < deadline:
                time.sleep(0.05)
            http_json("GET", f"{sim.base_url}/_sim/idle?seconds=30", timeout=40)
            time.sleep(2.5)  # the dispatcher applies stored webhooks within its next round

        import httpx

        url = f"{gateway.base_url}/v1/accounts/{account['account_id']}/whatsapp/messages"
        headers = {"Authorization": f"Bearer {token}"}
        body = {
            "channel_id": channel_id,
            "template": {"name": "otp_code", "language": "en", "parameters": ["1"]},
        }
        with httpx.Client(timeout=30) as client:

            def send(count: int) -> list[float]:
                took = []
                for _ in range(count):
                    start = time.perf_counter()
                    response = client.post(
                        url, json={**body, "phone_number": next_phone_number()}, headers=headers
                    )
                    took.append(time.perf_counter() - start)
                    if response.status_code != 201:
                        raise RuntimeError(f"send refused: {response.status_code} {response.text}")
                return took

            send(20)  # warm-up
            settle(20)
            # Background: the dispatcher's polling while nothing happens.
            idle_start, idle_stmts = time.monotonic(), counter.read()[0]
            time.sleep(3.0)
            idle_rate = (counter.read()[0] - idle_stmts) / (time.monotonic() - idle_start)

            start, (statements0, commits0) = time.monotonic(), counter.read()
            cpu0 = os.times()
            send(messages)
            in_requests = counter.read()[0] - statements0
            settle(20 + messages)
            cpu1 = os.times()
            elapsed = time.monotonic() - start
            statements1, commits1 = counter.read()
        background = idle_rate * elapsed
        return {
            "messages": messages,
            "status_webhooks": statuses,
            "statements_per_message": round((statements1 - statements0 - background) / messages, 1),
            "statements_during_requests_per_message": round(in_requests / messages, 1),
            "commits_per_message": round((commits1 - commits0) / messages, 2),
            "idle_statements_per_second": round(idle_rate, 1),
            "process_cpu_ms_per_message": round(
                1000 * ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / messages, 2
            ),
            "note": "process CPU includes the simulator and the client, which share this process",
        }
    finally:
        if gateway is not None:
            gateway.stop()
        sim.stop()


def statement_cost(database_url: str, count: int = 2000) -> dict[str, float]:
    """CPU and wall time of one trivial statement through an AsyncSession (the layer every query uses)."""
    from sqlalchemy import literal, select
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    async def run() -> dict[str, float]:
        engine = create_async_engine(database_url, pool_size=1, max_overflow=0)
        try:
            async with async_sessionmaker(engine)() as session:
                for _ in range(100):
                    await session.execute(select(literal(1)))
                cpu0, start = os.times(), time.perf_counter()
                for _ in range(count):
                    await session.execute(select(literal(1)))
                wall, cpu1 = time.perf_counter() - start, os.times()
        finally:
            await engine.dispose()
        return {
            "wall_us": round(wall / count * 1e6, 1),
            "user_cpu_us": round((cpu1.user - cpu0.user) / count * 1e6, 1),
            "system_cpu_us": round((cpu1.system - cpu0.system) / count * 1e6, 1),
        }

    return asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sigterm_as_interrupt()  # SIGTERM runs the same clean-up as Ctrl+C
    results: dict[str, Any] = {}
    for database in [d.strip() for d in args.databases.split(",") if d.strip()]:
        for statuses in (False, True):
            workdir = Path(tempfile.mkdtemp(prefix="wagate-bench-stmts-"))
            try:
                if database == "sqlite":
                    url = f"sqlite+aiosqlite:///{workdir / 'wagate.db'}"
                    figures = measure(url, workdir, args.messages, statuses)
                    figures["one_statement"] = statement_cost(url)
                elif postgres_available():
                    with throwaway_postgres_database() as (url, _):
                        figures = measure(url, workdir, args.messages, statuses)
                        figures["one_statement"] = statement_cost(url)
                else:
                    print("postgresql: not available; skipped", file=sys.stderr)
                    break
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            key = f"{database}, status webhooks {'on' if statuses else 'off'}"
            results[key] = figures
            print(f"{key}: {json.dumps(figures)}", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
