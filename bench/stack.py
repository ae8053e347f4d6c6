"""A whole gateway for a benchmark: the Cloud API simulator (own process), `wagate migrate`,
`wagate provision` and `wagate serve` (own process), all on 127.0.0.1, with the simulator's
control endpoints at hand; and the bare FastAPI endpoint every ratio divides by (bench/bare_app.py).
Everything they start is stopped, and their work directories removed, on exit.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import (
    BENCH_DIR,
    LOOPBACK,
    PYTHON,
    ManagedProcess,
    fernet_key,
    free_port,
    http_json,
    run_command,
    wagate_command,
    wait_http_ok,
)
from sqlalchemy import Engine, create_engine

from wagate.core.migrate import sync_url


def channel_spec(index: int) -> dict[str, str]:
    """The simulator's record of bench channel `index` (1, 2, ...), registered there so that
    provisioning finds its templates."""
    return {
        "phone_number_id": f"10654035224{index:04d}",
        "waba_id": f"10229012934{index:04d}",
        "display_phone_number": f"1555000{index:04d}",
    }


BENCH_CHANNEL = channel_spec(1)  # the one channel most benchmarks send on
_numbers = itertools.count()


def next_phone_number() -> str:
    """A distinct valid Azerbaijani mobile number; last seven digits >= 1000000, so never a magic one."""
    return f"+99455{1_000_000 + next(_numbers) % 9_000_000:07d}"


def provision_spec(token: str, messages_per_second: int, channels: int) -> dict[str, Any]:
    """Like tests/support.provision_file(), cut to one account, one administrator and its channels."""
    return {
        "accounts": [
            {
                "name": "Bench",
                "users": [
                    {
                        "email": "admin@bench.test",
                        "name": "Bench Admin",
                        "role": "administrator",
                        "password": secrets.token_urlsafe(12),
                    }
                ],
                "api_keys": [{"user": "admin@bench.test", "name": "bench", "token": token}],
                "channels": [
                    {
                        "name": f"Bench {index}",
                        "phone_number": "+" + spec["display_phone_number"],
                        "phone_number_id": spec["phone_number_id"],
                        "waba_id": spec["waba_id"],
                        "access_token": "EAAG-bench-token",
                        "members": ["admin@bench.test"],
                        "messages_per_second": messages_per_second,
                    }
                    for index, spec in enumerate(map(channel_spec, range(1, channels + 1)), start=1)
                ],
            }
        ]
    }


@dataclass
class GatewayStack:
    """Simulator (own process) + `wagate migrate` + `wagate provision` + `wagate serve` (own process).

    Use as a context manager; everything it starts is stopped on exit, its work directory removed.
    `database_url` None means a fresh SQLite file in the work directory. With `serve=False` nothing
    listens on `port` until the caller starts its own processes there (bench/scale.py); the
    simulator's status webhooks go to `port` either way.
    """

    database_url: str | None = None
    messages_per_second: int = 1000
    extra_env: dict[str, str] = field(default_factory=dict)
    # `wagate serve --no-dispatcher` and a `wagate worker` beside it (PostgreSQL): the sends and the
    # API (with Meta's webhooks) each get an event loop and a core of their own.
    split_worker: bool = False
    channels: int = 1
    serve: bool = True

    workdir: Path = field(init=False)
    sim: ManagedProcess | None = field(init=False, default=None)
    server: ManagedProcess | None = field(init=False, default=None)
    worker: ManagedProcess | None = field(init=False, default=None)

    def __enter__(self) -> GatewayStack:

        self.workdir = Path(tempfile.mkdtemp(prefix="wagate-bench-"))
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        self.app_secret = secrets.token_hex(16)
        self.token = "wg_bench_" + secrets.token_urlsafe(24)
        self.sim_port, self.port = free_port(), free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.sim_url = f"http://{LOOPBACK}:{self.sim_port}"
        if self.database_url is None:
            self.database_url = f"sqlite+aiosqlite:///{self.workdir / 'wagate.db'}"
        self.sim = ManagedProcess(
            "simulator",
            [
                PYTHON,
                str(BENCH_DIR / "sim_server.py"),
                "--port",
                str(self.sim_port),
                "--webhook-url",
                f"{self.url}/webhooks/whatsapp",
                "--app-secret",
                self.app_secret,
            ],
            log_dir=self.workdir,
            cwd=self.workdir,
        )
        wait_http_ok(f"{self.sim_url}/_sim/config", process=self.sim)
        for index in range(1, self.channels + 1):
            http_json("POST", f"{self.sim_url}/_sim/channels", channel_spec(index))
        self.env = {
            **os.environ,
            "WAGATE_DATABASE_URL": self.database_url,
            "WAGATE_GRAPH_API_URL": f"{self.sim_url}/v23.0",
            "WAGATE_META_APP_SECRET": self.app_secret,
            "WAGATE_SECRET_KEY": fernet_key(),
            "WAGATE_LOG_LEVEL": "warning",
            # The bench drives one process to its capacity with one API key, past the default rate per
            # key (1000/s, docs/security.md); a deployment that sends that fast from one key does the same.
            "WAGATE_API_KEY_REQUESTS_PER_SECOND": "0",
            **self.extra_env,
        }
        wagate = wagate_command()
        run_command([*wagate, "migrate"], env=self.env, cwd=self.workdir)
        spec_path = self.workdir / "provision.json"
        spec = provision_spec(self.token, self.messages_per_second, self.channels)
        spec_path.write_text(json.dumps(spec))
        provisioned = json.loads(
            run_command([*wagate, "provision", str(spec_path)], env=self.env, cwd=self.workdir)
        )
        account = provisioned["accounts"][0]
        for channel in account["channels"]:
            if not channel.get("templates"):
                raise RuntimeError(f"provisioning synced no templates: {channel}")
        self.account_id = int(account["account_id"])
        self.channel_ids = [int(channel["channel_id"]) for channel in account["channels"]]
        self.channel_id = self.channel_ids[0]
        if not self.serve:
            return
        serve = [*wagate, "serve", "--host", LOOPBACK, "--port", str(self.port)]
        if self.split_worker:
            serve.append("--no-dispatcher")
            self.worker = ManagedProcess(
                "worker", [*wagate, "worker"], log_dir=self.workdir, env=self.env, cwd=self.workdir
            )
        self.server = ManagedProcess("serve", serve, log_dir=self.workdir, env=self.env, cwd=self.workdir)
        self.startup_seconds = wait_http_ok(f"{self.url}/healthz", process=self.server)

    @property
    def messages_url(self) -> str:
        return f"{self.url}/v1/accounts/{self.account_id}/whatsapp/messages"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}

    def otp_body(self, code: str = "123456") -> bytes:
        """A send of the OTP template to a number no other request of this run uses."""
        return json.dumps(
            {
                "channel_id": self.channel_id,
                "phone_number": next_phone_number(),
                "template": {"name": "otp_code", "language": "en", "parameters": [code]},
            }
        ).encode()

    # --- the simulator's side

    def sim_configure(self, **changes: Any) -> Any:
        return http_json("POST", f"{self.sim_url}/_sim/config", changes)

    def upstream_total(self) -> int:
        """How many sends the simulator has accepted on the bench channel."""
        stats = http_json("GET", f"{self.sim_url}/_sim/stats")
        channel = stats["phone_number_ids"].get(BENCH_CHANNEL["phone_number_id"])
        return int(channel["total"]) if channel else 0

    def upstream_messages(self, channel: int = 1) -> list[dict[str, Any]]:
        """The simulator's log of the sends on bench channel `channel` (1, 2, ...), in order of receipt."""
        url = f"{self.sim_url}/_sim/messages?phone_number_id={channel_spec(channel)['phone_number_id']}"
        data: list[dict[str, Any]] = http_json("GET", url, timeout=120)["data"]
        return data

    def wait_upstream(self, expected_total: int, *, timeout: float) -> tuple[bool, float]:
        """Wait until the simulator has accepted `expected_total` sends; (reached, seconds waited)."""
        start = time.monotonic()
        deadline = start + timeout
        while True:
            if self.upstream_total() >= expected_total:
                return True, time.monotonic() - start
            if time.monotonic() > deadline:
                return False, time.monotonic() - start
            time.sleep(0.05)

    def wait_webhooks_idle(self, timeout: float = 30.0) -> bool:
        """Wait until the simulator has no status webhook left to deliver."""
        answer = http_json(
            "GET", f"{self.sim_url}/_sim/idle?seconds={min(timeout, 60.0)}", timeout=timeout + 10
        )
        return bool(answer["idle"])

    def sync_engine(self) -> Engine:
        """A blocking engine on the gateway's database, to read what it stored (SQLite readers do not
        block its writer in WAL, and wait up to 30 s for its lock)."""
        assert self.database_url is not None
        url = sync_url(self.database_url)
        return create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {})

    def __exit__(self, *exc_info: object) -> None:
        try:
            for process in (self.server, self.worker, self.sim):
                if process is not None:
                    process.stop()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


# The bare endpoint's request: the same body as a send, on the same path.
BARE_BODY = json.dumps(
    {
        "channel_id": 1,
        "phone_number": "+994551234567",
        "template": {"name": "otp_code", "language": "en", "parameters": ["123456"]},
    }
).encode()
BARE_HEADERS = {"Authorization": "Bearer wg_bench_bare", "Content-Type": "application/json"}


class BareServer:
    """bench/bare_app.py in a process of its own (`raw`: the plain ASGI app, no framework), answering
    at `url`; `stop()` ends it."""

    def __init__(self, workdir: Path, name: str = "bare", *, raw: bool = False) -> None:
        self.port = free_port()
        argv = [PYTHON, str(BENCH_DIR / "bare_app.py"), "--port", str(self.port), *(["--raw"] if raw else [])]
        self.process = ManagedProcess(name, argv, log_dir=workdir, cwd=workdir)
        try:
            wait_http_ok(f"http://{LOOPBACK}:{self.port}/healthz", process=self.process)
        except BaseException:
            self.process.stop()
            raise
        self.url = f"http://{LOOPBACK}:{self.port}/v1/accounts/1/whatsapp/messages"

    def stop(self) -> None:
        self.process.stop()
