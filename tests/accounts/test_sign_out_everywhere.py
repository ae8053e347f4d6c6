"""Sessions end with their password (issue 45, point 4), on both databases: a password changed by
`wagate provision` ends that user's sessions at once, and `wagate users sign-out EMAIL` ends a user's
sessions everywhere; other users stay signed in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet

from support.app_in_thread import running_gateway
from support.harness import APP_SECRET, Gateway, Simulator, post_login, provision_file

WAGATE = [sys.executable, "-m", "wagate.ops.cli"]


@pytest.fixture(scope="module")
def secret_key() -> str:
    return Fernet.generate_key().decode()


@pytest.fixture(scope="module")
def own_gateway(database_url: str, simulator: Simulator, secret_key: str) -> Iterator[Gateway]:
    with running_gateway(database_url, simulator, secret_key=secret_key) as running:
        yield running


def wagate(gateway: Gateway, secret_key: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "WAGATE_DATABASE_URL": gateway.database_url,
        "WAGATE_GRAPH_API_URL": gateway.sim.graph_url,
        "WAGATE_META_APP_SECRET": APP_SECRET,
        "WAGATE_SECRET_KEY": secret_key,
        "WAGATE_LOG_LEVEL": "warning",
    }
    return subprocess.run(
        [*WAGATE, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def client(gateway: Gateway, email: str, password: str) -> httpx.Client:
    signed = httpx.Client(base_url=gateway.url)
    assert post_login(signed, email, password).status_code == 303
    return signed


def signed_in(session: httpx.Client) -> bool:
    page = session.get("/conversations")
    if page.status_code == 200:
        return True
    assert page.status_code in (302, 303, 307) and "/login" in page.headers["location"], page.status_code
    return False


def with_password(spec: dict[str, Any], email: str, password: str) -> dict[str, Any]:
    for account in spec["accounts"]:
        for user in account["users"]:
            if user["email"] == email:
                user["password"] = password
    return spec


def test_a_new_password_ends_the_old_sessions(own_gateway: Gateway, secret_key: str, tmp_path: Path) -> None:
    agent = client(own_gateway, "agent@acme.test", "pw-agent")
    admin = client(own_gateway, "admin@acme.test", "pw-admin")
    assert signed_in(agent) and signed_in(admin)
    # Provisioning the same file again changes no password: nobody is signed out.
    path = tmp_path / "accounts.json"
    path.write_text(json.dumps(provision_file()))
    assert wagate(own_gateway, secret_key, "provision", str(path), cwd=tmp_path).returncode == 0
    assert signed_in(agent) and signed_in(admin)
    # The agent's new password: the agent's cookie signs no one in; the administrator stays.
    path.write_text(json.dumps(with_password(provision_file(), "agent@acme.test", "pw-agent-2")))
    done = wagate(own_gateway, secret_key, "provision", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not signed_in(agent)
    assert signed_in(admin)
    assert signed_in(client(own_gateway, "agent@acme.test", "pw-agent-2"))
    # Back to the file's password, for the other tests of the module.
    path.write_text(json.dumps(provision_file()))
    assert wagate(own_gateway, secret_key, "provision", str(path), cwd=tmp_path).returncode == 0


def test_an_operator_signs_a_user_out_everywhere(
    own_gateway: Gateway, secret_key: str, tmp_path: Path
) -> None:
    first = client(own_gateway, "admin@acme.test", "pw-admin")
    second = client(own_gateway, "admin@acme.test", "pw-admin")
    agent = client(own_gateway, "agent@acme.test", "pw-agent")
    done = wagate(own_gateway, secret_key, "users", "sign-out", "Admin@Acme.test", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["email"] == "admin@acme.test" and result["sessions_ended"] >= 2
    assert not signed_in(first) and not signed_in(second)
    assert signed_in(agent)
    unknown = wagate(own_gateway, secret_key, "users", "sign-out", "nobody@acme.test", cwd=tmp_path)
    assert (
        unknown.returncode == 1 and "nobody@acme.test" in unknown.stderr and "Traceback" not in unknown.stderr
    )
