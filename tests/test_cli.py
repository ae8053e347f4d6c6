"""The operating contract (API.md section 10): `wagate migrate`, `provision`, `templates sync`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from support.harness import APP_SECRET, MAIN, Simulator, provision_file

WAGATE = [sys.executable, "-m", "wagate.ops.cli"]


@pytest.fixture(scope="module")
def secret_key() -> str:
    return Fernet.generate_key().decode()


@pytest.fixture
def env(database_url: str, simulator: Simulator, secret_key: str) -> Iterator[dict[str, str]]:
    yield {
        **os.environ,
        "WAGATE_DATABASE_URL": database_url,
        "WAGATE_GRAPH_API_URL": simulator.graph_url,
        "WAGATE_META_APP_SECRET": APP_SECRET,
        "WAGATE_SECRET_KEY": secret_key,
        "WAGATE_LOG_LEVEL": "warning",
    }


def wagate(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WAGATE, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def provision(env: dict[str, str], spec: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "accounts.json"
    path.write_text(json.dumps(spec))
    done = wagate(env, "provision", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_migrate_then_provision_twice_changes_nothing(env: dict[str, str], tmp_path: Path) -> None:
    assert wagate(env, "migrate", cwd=tmp_path).returncode == 0
    spec = provision_file()
    spec["accounts"][0]["api_keys"].append({"user": "agent@acme.test", "name": "generated"})
    spec["accounts"][0]["webhooks"] = [{"url": "https://crm.example/hooks/wa", "events": ["message_updated"]}]
    first = provision(env, spec, tmp_path)
    second = provision(env, spec, tmp_path)
    acme_first, acme_second = first["accounts"][0], second["accounts"][0]
    assert acme_first["account_id"] == acme_second["account_id"]
    assert [c["channel_id"] for c in acme_first["channels"]] == [
        c["channel_id"] for c in acme_second["channels"]
    ]
    assert acme_first["channels"][0]["templates"] > 30
    keys_first = {k["name"]: k for k in acme_first["api_keys"]}
    keys_second = {k["name"]: k for k in acme_second["api_keys"]}
    assert (
        keys_first["crm"]["token"]
        == keys_second["crm"]["token"]
        == spec["accounts"][0]["api_keys"][0]["token"]
    )
    # A generated token is shown once, when it is made; afterwards only its id.
    assert keys_first["generated"]["token"].startswith("wg_")
    assert keys_second["generated"]["token"] is None
    assert keys_first["generated"]["api_key_id"] == keys_second["generated"]["api_key_id"]
    # A webhook's signing secret likewise: made and shown once, the webhook kept by its URL.
    [hook_first], [hook_second] = acme_first["webhooks"], acme_second["webhooks"]
    assert hook_first["secret"].startswith("whsec_") and hook_second["secret"] is None
    assert hook_first["id"] == hook_second["id"] and hook_first["url"] == "https://crm.example/hooks/wa"


def test_provision_rejects_a_broken_file_clearly(env: dict[str, str], tmp_path: Path) -> None:
    assert wagate(env, "migrate", cwd=tmp_path).returncode == 0
    path = tmp_path / "broken.json"
    path.write_text(json.dumps({"accounts": [{"name": "X", "users": [{"email": "a@x.test"}]}]}))
    done = wagate(env, "provision", str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert "not a valid provisioning file" in done.stderr and "Traceback" not in done.stderr
    spec = provision_file()
    spec["accounts"][0]["channels"][0]["members"].append("nobody@acme.test")
    path.write_text(json.dumps(spec))
    done = wagate(env, "provision", str(path), cwd=tmp_path)
    assert done.returncode == 2 and "nobody@acme.test" in done.stderr


def test_templates_sync_on_demand(env: dict[str, str], simulator: Simulator, tmp_path: Path) -> None:
    assert wagate(env, "migrate", cwd=tmp_path).returncode == 0
    provisioned = provision(env, provision_file(), tmp_path)
    main_id = provisioned["accounts"][0]["channels"][0]["channel_id"]
    before = provisioned["accounts"][0]["channels"][0]["templates"]
    templates = simulator.http.get(f"{simulator.url}/_sim/templates/{MAIN['waba_id']}").json()["data"]
    extra = {
        "name": "cli_added",
        "language": "en",
        "status": "APPROVED",
        "category": "UTILITY",
        "components": [],
    }
    simulator.http.put(
        f"{simulator.url}/_sim/templates/{MAIN['waba_id']}", json={"data": [*templates, extra]}
    )
    try:
        done = wagate(env, "templates", "sync", "--channel-id", str(main_id), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"channels": [{"channel_id": main_id, "templates": before + 1}]}
    finally:
        simulator.http.put(f"{simulator.url}/_sim/templates/{MAIN['waba_id']}", json={"data": templates})
