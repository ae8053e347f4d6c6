"""The shipped deployment files (deploy/, docs/deployment.md) against the code they describe: every
setting has a row in the settings reference, and the compose file, the environment file and the
systemd units name only settings that exist and commands and options that the `wagate` command has.
And what they promise about secrets (issue 45, point 8): PostgreSQL sees none of wagate's, wagate
connects as a role that is no superuser, and what the gateway creates is readable by its user only."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest
import yaml
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from support.gateway_process import WAGATE, GatewayProcess, free_port
from support.harness import postgres_admin_url
from wagate.core.config import Settings
from wagate.core.security import SecretBox, SecretKeyError, new_secret_key, read_or_create_key_file
from wagate.ops.cli import app

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DEPLOYMENT_DOC = ROOT / "docs" / "deployment.md"
SETTING = re.compile(r"\bWAGATE_[A-Z0-9_]+\b")


def setting_names() -> set[str]:
    return {f"WAGATE_{name.upper()}" for name in Settings.model_fields}


def reference_rows() -> set[str]:
    """The variables with a row in docs/deployment.md's "Settings reference"."""
    text = DEPLOYMENT_DOC.read_text()
    section = text.split("\n## Settings reference\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(WAGATE_[A-Z0-9_]+)` \|", section, flags=re.MULTILINE))


def test_every_setting_has_a_row_in_the_settings_reference() -> None:
    missing = setting_names() - reference_rows()
    assert not missing, f"settings with no row in deployment.md's Settings reference: {sorted(missing)}"


def test_the_settings_table_is_written_once() -> None:
    # docs/operations.md links to the reference instead of keeping a table of its own.
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert not re.search(r"^\| `WAGATE_DATABASE_URL` \|", operations, flags=re.MULTILINE)
    assert "deployment.md#settings-reference" in operations


def compose() -> dict:
    loaded: dict = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def test_compose_and_env_file_name_only_existing_settings() -> None:
    named = set(SETTING.findall((DEPLOY / "compose.yaml").read_text()))
    named |= set(SETTING.findall((DEPLOY / "wagate.env.example").read_text()))
    unknown = named - setting_names()
    assert not unknown, (
        f"deploy/ names settings that src/wagate/core/config.py does not have: {sorted(unknown)}"
    )


@pytest.mark.parametrize("name", ["wagate.env.example", "postgres.env.example"])
def test_env_file_example_is_a_plain_environment_file(name: str) -> None:
    # systemd's EnvironmentFile= and compose's env_file both read KEY=VALUE lines (comments allowed).
    for line in (DEPLOY / name).read_text().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            assert re.fullmatch(r"[A-Z][A-Z0-9_]*=\S*", stripped), line


def env_file_values(name: str) -> dict[str, str]:
    lines = (DEPLOY / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_postgres_gets_its_own_variables_only() -> None:
    # A server's environment is readable by whoever connects as a superuser: wagate's secrets (the
    # encryption key) must not be in it.
    postgres = compose()["services"]["postgres"]
    env_files = postgres.get("env_file", [])
    env_files = [env_files] if isinstance(env_files, str) else env_files
    assert env_files == ["postgres.env"]
    assert not [name for name in postgres.get("environment", {}) if name.startswith("WAGATE_")]
    assert set(env_file_values("postgres.env.example")) == {"POSTGRES_PASSWORD", "APP_DB_PASSWORD"}
    assert "POSTGRES_PASSWORD" not in env_file_values("wagate.env.example")
    # Its first start makes the role wagate connects as, with an executable script of ours.
    init = next(v for v in postgres["volumes"] if "/docker-entrypoint-initdb.d/" in v)
    script = DEPLOY / init.split(":", 1)[0]
    assert script.exists() and os.access(script, os.X_OK), script


def test_wagate_connects_as_the_role_that_owns_its_database() -> None:
    url = env_file_values("wagate.env.example")["WAGATE_DATABASE_URL"]
    user = url.split("://", 1)[1].split(":", 1)[0]
    assert user == "wagate"  # not `postgres`, the superuser
    assert 'CREATE ROLE :"role" LOGIN' in (DEPLOY / "postgres-init.sh").read_text()


def test_the_api_believes_the_proxy_on_the_compose_network() -> None:
    loaded = compose()
    api = loaded["services"]["api"]
    subnet = loaded["networks"]["default"]["ipam"]["config"][0]["subnet"]
    assert api["environment"]["WAGATE_TRUSTED_PROXIES"] == subnet
    assert Settings(trusted_proxies=subnet).trusted_proxies == subnet  # a network the setting takes
    assert Settings(secure_cookies=api["environment"]["WAGATE_SECURE_COOKIES"]).secure_cookies is True


def run_cli(args: list[str]) -> None:
    """`args` parse as a `wagate` command line (`--help` stops it before anything runs)."""
    result = CliRunner().invoke(app, [*args, "--help"])
    assert result.exit_code == 0, f"wagate {shlex.join(args)}: {result.output}"


def test_compose_services_run_wagate_commands_that_exist() -> None:
    services = compose()["services"]
    assert {"postgres", "migrate", "api", "worker"} <= set(services)
    for name in ("migrate", "api", "worker"):
        service = services[name]
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).exists()
        run_cli(service["command"])
    assert "--no-dispatcher" in services["api"]["command"]


def unit_commands(path: Path) -> list[str]:
    """The `wagate ...` arguments of a unit's ExecStart, instance specifiers given a value."""
    exec_start = next(
        line.split("=", 1)[1] for line in path.read_text().splitlines() if line.startswith("ExecStart=")
    )
    words = shlex.split(exec_start.replace("%i", "1"))
    if words[0] == "/bin/sh":  # `sh -c 'exec /opt/wagate/bin/wagate ... $$((9100 + 1))'`
        words = shlex.split(words[2].replace("$$((9100 + 1))", "9101"))[1:]
    assert words[0] == "/opt/wagate/bin/wagate", exec_start
    return words[1:]


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        ("wagate.service", ["serve"]),
        ("wagate-api@.service", ["serve", "--no-dispatcher"]),
        ("wagate-worker@.service", ["worker"]),
    ],
)
def test_systemd_units_run_wagate_commands_that_exist(unit: str, expected: list[str]) -> None:
    path = DEPLOY / "systemd" / unit
    args = unit_commands(path)
    assert args[: len(expected)] == expected
    run_cli(args)
    text = path.read_text()
    assert "EnvironmentFile=/etc/wagate/wagate.env" in text
    assert "KillSignal=SIGTERM" in text  # SIGTERM drains (docs/operations.md)
    # What the process creates (the SQLite files, the key file) is readable by its user only.
    assert re.search(r"^UMask=0077$", text, flags=re.MULTILINE), unit


def test_dockerfile_installs_the_project_and_runs_wagate() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", text, flags=re.MULTILINE):
        for item in source.split():
            assert (ROOT / item).exists(), f"deploy/Dockerfile copies {item}, which does not exist"
    assert 'ENTRYPOINT ["wagate"]' in text
    command = re.search(r"^CMD (\[.*\])$", text, flags=re.MULTILINE)
    assert command is not None
    run_cli(json.loads(command.group(1)))


@pytest.mark.skipif(
    shutil.which("docker-compose") is None, reason="no docker-compose program to read the compose file"
)
def test_compose_file_is_valid_for_compose(tmp_path: Path) -> None:
    # `config` needs no engine: it reads, validates and interpolates the file.
    shutil.copy(DEPLOY / "compose.yaml", tmp_path / "compose.yaml")
    shutil.copy(DEPLOY / "wagate.env.example", tmp_path / "wagate.env")
    shutil.copy(DEPLOY / "postgres.env.example", tmp_path / "postgres.env")
    shutil.copy(DEPLOY / "postgres-init.sh", tmp_path / "postgres-init.sh")
    done = subprocess.run(
        ["docker-compose", "-f", str(tmp_path / "compose.yaml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_a_fresh_sqlite_database_and_key_file_are_private(tmp_path: Path) -> None:
    # The embedded layout as a first `wagate serve` makes it, under the usual umask (0022, which
    # leaves what a process creates readable by everyone): the database, SQLite's files beside it
    # and the generated encryption key are the owner's only.
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAGATE_")}
    env["WAGATE_DATABASE_URL"] = f"sqlite:///{data / 'wagate.db'}"
    gateway = GatewayProcess(env, free_port(), tmp_path)
    before = os.umask(0o022)
    try:
        gateway.start()
    finally:
        os.umask(before)
    try:
        assert httpx.get(f"{gateway.url}/readyz", timeout=10).status_code == 200
        running = {path.name: stat.S_IMODE(path.stat().st_mode) for path in data.iterdir()}
    finally:
        gateway.stop()
    assert {"wagate.db", "wagate.secret"} <= set(running), running
    assert all(mode == 0o600 for mode in running.values()), {k: oct(v) for k, v in running.items()}
    SecretBox((data / "wagate.secret").read_text().strip())  # a key the gateway reads back


def test_processes_starting_together_make_one_key_file(tmp_path: Path) -> None:
    # Each would otherwise write a key of its own, and one process's secrets be unreadable by the others.
    key_file = tmp_path / "state" / "wagate.secret"
    start = threading.Barrier(8)

    def make() -> str:
        start.wait()
        return read_or_create_key_file(key_file)

    with ThreadPoolExecutor(8) as pool:
        keys = set(pool.map(lambda _: make(), range(8)))
    assert keys == {key_file.read_text().strip()}
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_an_empty_key_file_is_refused_clearly(tmp_path: Path) -> None:
    key_file = tmp_path / "wagate.secret"
    key_file.touch()
    with pytest.raises(SecretKeyError, match="is empty"):
        read_or_create_key_file(key_file, wait_seconds=0.2)


def test_wagate_runs_as_a_role_that_is_no_superuser(postgres_available: bool, tmp_path: Path) -> None:
    # deploy/postgres-init.sh as the postgres image runs it, then the migrations and `wagate serve` as
    # the role it made: owning the database is all they need.
    if not postgres_available:
        pytest.skip("no PostgreSQL server (set WAGATE_TEST_POSTGRES_URL); CI runs these")
    admin = make_url(postgres_admin_url())
    suffix = secrets.token_hex(4)
    role, database, password = f"wagate_role_{suffix}", f"wagate_owned_{suffix}", secrets.token_urlsafe(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAGATE_", "PG"))}
    env.update(
        PGHOST=admin.host or "127.0.0.1",
        PGPORT=str(admin.port or 5432),
        POSTGRES_USER=admin.username or "postgres",
        POSTGRES_DB=admin.database or "postgres",
        APP_DB_USER=role,
        APP_DB_NAME=database,
        APP_DB_PASSWORD=password,
    )
    if admin.password:
        env["PGPASSWORD"] = admin.password
    admin_dsn = admin.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        done = subprocess.run(
            ["sh", str(DEPLOY / "postgres-init.sh")], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        url = admin.set(username=role, password=password, database=database).render_as_string(
            hide_password=False
        )
        app_env = {k: v for k, v in os.environ.items() if not k.startswith("WAGATE_")}
        app_env.update(WAGATE_DATABASE_URL=url, WAGATE_SECRET_KEY=new_secret_key())
        migrate = subprocess.run(
            [str(WAGATE), "migrate"], env=app_env, capture_output=True, text=True, timeout=120
        )
        assert migrate.returncode == 0, migrate.stderr
        gateway = GatewayProcess(app_env, free_port(), tmp_path, args=("--no-dispatcher",))
        gateway.start()
        try:
            assert httpx.get(f"{gateway.url}/readyz", timeout=10).status_code == 200
        finally:
            gateway.stop()
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (
                False,
            )
            # What a superuser could: read the server's environment (and so any secret in it).
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT pg_read_file('/proc/self/environ')")
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
