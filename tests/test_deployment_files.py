"""The shipped deployment files (deploy/, docs/deployment.md) against the code they describe: every
setting has a row in the settings reference, and the compose file, the environment file and the
systemd units name only settings that exist and commands and options that the `wagate` command has."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from wagate.cli import app
from wagate.config import Settings

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
    assert not unknown, f"deploy/ names settings that src/wagate/config.py does not have: {sorted(unknown)}"


def test_env_file_example_is_a_plain_environment_file() -> None:
    # systemd's EnvironmentFile= and compose's env_file both read KEY=VALUE lines (comments allowed).
    for line in (DEPLOY / "wagate.env.example").read_text().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            assert re.fullmatch(r"[A-Z][A-Z0-9_]*=\S*", stripped), line


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
    done = subprocess.run(
        ["docker-compose", "-f", str(tmp_path / "compose.yaml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
