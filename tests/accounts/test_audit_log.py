"""The audit log (issue 14, point 6), on both databases: each change of API keys, webhooks, inbox members
and channels, made through the API, the dashboard or provisioning, leaves exactly one entry naming who
(the key and its user, the signed-in user, provisioning), the action, the target and what changed,
never a secret; administrators read it newest first, a page at a time, by action; agents and other
accounts cannot."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet

from support.app_in_thread import gateway_settings, running_gateway, sql
from support.harness import (
    ADMIN_TOKEN,
    AGENT_TOKEN,
    OTHER_TOKEN,
    Gateway,
    Simulator,
    new_number,
    post_login,
    provision_file,
    wait_for,
)
from wagate.ops.operations import run_provision
from wagate.ops.provisioning import ProvisionFile

KEY = Fernet.generate_key().decode()
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
HOOK_URL = "http://127.0.0.1:9/audit-hook"


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    with running_gateway(
        database_url, simulator, secret_key=KEY, allow_private_urls=True, channel_probe_seconds=0.5
    ) as running:
        yield running


def audit_log(
    gateway: Gateway, token: str = ADMIN_TOKEN, account: str = "acme", **params: Any
) -> httpx.Response:
    return gateway.http.get(
        gateway.v1("/audit_log", gateway.ids[account]), params=params, headers=gateway.headers(token)
    )


def entries(gateway: Gateway, **params: Any) -> list[dict[str, Any]]:
    response = audit_log(gateway, **params)
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def newest_id(gateway: Gateway) -> int:
    found = entries(gateway, limit=1)
    return found[0]["id"] if found else 0


def since(gateway: Gateway, after: int) -> list[dict[str, Any]]:
    """The entries written after entry `after`, oldest first."""
    return sorted((e for e in entries(gateway, limit=200) if e["id"] > after), key=lambda e: e["id"])


def user_id(gateway: Gateway, email: str) -> int:
    return int(sql(gateway.database_url, "SELECT id FROM users WHERE email = :e", e=email)[0][0])


API_ACTOR = {"type": "api_key", "email": "admin@acme.test", "api_key_name": "crm"}
DASHBOARD_ACTOR = {"type": "dashboard", "email": "admin@acme.test", "api_key_id": None, "api_key_name": None}


def actor_is(entry: dict[str, Any], expected: dict[str, Any]) -> bool:
    return all(entry["actor"][k] == v for k, v in expected.items())


class Dashboard:
    """An administrator signed in to the dashboard over HTTP, posting its forms with the CSRF token."""

    def __init__(self, gateway: Gateway, email: str = "admin@acme.test", password: str = "pw-admin") -> None:
        self.client = httpx.Client(base_url=gateway.url)
        assert post_login(self.client, email, password).status_code == 303
        found = CSRF.search(self.client.get("/settings/api-keys").text)
        assert found is not None
        self.csrf = found.group(1)

    def post(self, path: str, **form: str) -> httpx.Response:
        return self.client.post(path, data={"csrf_token": self.csrf, **form})


def test_provisioning_is_audited_once_and_a_second_run_adds_nothing(
    gateway: Gateway, simulator: Simulator
) -> None:
    created = entries(gateway, action="api_key.created")
    assert {e["changes"]["name"] for e in created} == {"crm", "agent", "outsider", "old"}
    assert all(e["actor"]["type"] == "provisioning" and e["actor"]["user_id"] is None for e in created)
    assert all("token" not in e["changes"] and e["changes"]["prefix"].startswith("wg_") for e in created)
    [revoked] = entries(gateway, action="api_key.revoked")
    assert revoked["changes"]["name"] == "old"
    channels = entries(gateway, action="channel.created")
    assert {e["changes"]["name"] for e in channels} == {"Main", "Second"}
    assert all(e["changes"]["access_token"] == "set" for e in channels)
    assert len(entries(gateway, action="membership.added")) == 4

    before = newest_id(gateway)
    config = gateway_settings(gateway.database_url, simulator, KEY)
    with ThreadPoolExecutor(1) as runner:  # the sync of templates is its own loop's
        runner.submit(
            asyncio.run, run_provision(config, ProvisionFile.model_validate(provision_file()))
        ).result()
    assert since(gateway, before) == []


def test_webhook_changes_through_the_api_each_leave_one_entry_by_the_key(gateway: Gateway) -> None:
    before = newest_id(gateway)
    created = gateway.http.post(
        gateway.v1("/webhooks"),
        json={"url": HOOK_URL, "events": ["message_updated"]},
        headers=gateway.headers(),
    )
    assert created.status_code == 201, created.text
    webhook = created.json()
    path = gateway.v1(f"/webhooks/{webhook['id']}")
    for change in (
        {"url": HOOK_URL + "-2", "events": ["message_updated", "batch_completed"]},
        {"enabled": False},
        {"enabled": True},
        {"enabled": True},  # no change: no entry
    ):
        answer = gateway.http.patch(path, json=change, headers=gateway.headers())
        assert answer.status_code == 200, answer.text
    assert gateway.http.delete(path, headers=gateway.headers()).status_code == 204

    found = since(gateway, before)
    assert [e["action"] for e in found] == [
        "webhook.created",
        "webhook.updated",
        "webhook.disabled",
        "webhook.enabled",
        "webhook.deleted",
    ]
    assert all(actor_is(e, API_ACTOR) for e in found), found
    assert all(e["target"] == {"type": "webhook", "id": str(webhook["id"])} for e in found)
    assert found[0]["changes"] == {"url": HOOK_URL, "events": ["message_updated"], "secret": "set"}
    assert found[1]["changes"] == {
        "url": {"from": HOOK_URL, "to": HOOK_URL + "-2"},
        "events": {"from": ["message_updated"], "to": ["message_updated", "batch_completed"]},
    }
    assert webhook["secret"] not in str(found) and webhook["secret"].removeprefix("whsec_") not in str(found)


def test_changes_through_the_dashboard_each_leave_one_entry_by_the_signed_in_user(gateway: Gateway) -> None:
    dashboard = Dashboard(gateway)
    before = newest_id(gateway)
    agent = user_id(gateway, "agent@acme.test")

    page = dashboard.post("/settings/api-keys", name="audited", user_id=str(agent))
    assert page.status_code == 200, page.text
    (key_id,) = sql(gateway.database_url, "SELECT id FROM api_keys WHERE name = 'audited'")[0]
    assert dashboard.post(f"/settings/api-keys/{key_id}/revoke").status_code == 303
    assert dashboard.post(f"/settings/api-keys/{key_id}/revoke").status_code == 303  # again: nothing new

    outsider = user_id(gateway, "outsider@acme.test")
    main = gateway.ids["main"]
    assert dashboard.post(f"/settings/inboxes/{main}/members", user_id=str(outsider)).status_code == 303
    assert dashboard.post(f"/settings/inboxes/{main}/members", user_id=str(outsider)).status_code == 303
    assert dashboard.post(f"/settings/inboxes/{main}/members/{outsider}/remove").status_code == 303

    base = "/settings/integrations/webhooks"
    assert dashboard.post(base, url=HOOK_URL + "-d", **{"event:message_updated": "on"}).status_code in (
        200,
        303,
    )
    (hook_id,) = sql(gateway.database_url, "SELECT id FROM webhooks WHERE url = :u", u=HOOK_URL + "-d")[0]
    edited = dashboard.post(
        f"{base}/{hook_id}/edit",
        url=HOOK_URL + "-e",
        **{"event:message_updated": "on", "event:message_created": "on"},
    )
    assert edited.status_code == 303, edited.text
    assert dashboard.post(f"{base}/{hook_id}/enabled", enabled="false").status_code == 303
    assert dashboard.post(f"{base}/{hook_id}/enabled", enabled="true").status_code == 303
    assert dashboard.post(f"{base}/{hook_id}/delete").status_code == 303

    found = since(gateway, before)
    assert [(e["action"], e["target"]["type"]) for e in found] == [
        ("api_key.created", "api_key"),
        ("api_key.revoked", "api_key"),
        ("membership.added", "channel"),
        ("membership.removed", "channel"),
        ("webhook.created", "webhook"),
        ("webhook.updated", "webhook"),
        ("webhook.disabled", "webhook"),
        ("webhook.enabled", "webhook"),
        ("webhook.deleted", "webhook"),
    ]
    assert all(actor_is(e, DASHBOARD_ACTOR) for e in found), found
    assert found[0]["changes"]["owner_email"] == "agent@acme.test" and found[0]["target"]["id"] == str(key_id)
    assert found[2]["changes"] == {"channel": "Main", "user_id": outsider, "email": "outsider@acme.test"}
    # The token shown once on the page is in no entry.
    token = re.search(r"data-secret>([^<]+)<", page.text)
    assert token is not None and token.group(1).strip() not in str(found)
    dashboard.client.close()


def test_only_administrators_of_the_account_read_it(gateway: Gateway) -> None:
    agent = audit_log(gateway, AGENT_TOKEN)
    assert agent.status_code == 403 and agent.json()["error"]["code"] == "administrator_required"
    other = audit_log(gateway, OTHER_TOKEN)  # Globex's administrator, Acme's log
    assert other.status_code == 403 and other.json()["error"]["code"] == "forbidden"
    assert audit_log(gateway, "wg_not_a_key_at_all_000000000").status_code == 401
    # Globex's own log has only Globex's changes.
    own = audit_log(gateway, OTHER_TOKEN, account="globex")
    assert own.status_code == 200, own.text
    names = {e["changes"].get("name") for e in own.json()["data"] if e["action"] == "api_key.created"}
    assert names == {"erp"}

    with httpx.Client(base_url=gateway.url) as agent_page:
        assert post_login(agent_page, "agent@acme.test", "pw-agent").status_code == 303
        refused = agent_page.get("/settings/audit")
        assert refused.status_code == 403 and "audit-log" not in refused.text


def test_pages_newest_first_by_action_and_422_for_bad_parameters(gateway: Gateway) -> None:
    everything = entries(gateway, limit=200)
    ids = [e["id"] for e in everything]
    assert ids == sorted(ids, reverse=True) and len(ids) >= 10
    first = audit_log(gateway, limit=3).json()
    second = audit_log(gateway, limit=3, before=first["next_before"]).json()
    assert [e["id"] for e in first["data"] + second["data"]] == ids[:6]
    assert first["next_before"] == ids[2]
    last = audit_log(gateway, limit=200).json()
    assert last["next_before"] is None

    webhooks = entries(gateway, action="webhook.deleted")
    assert webhooks and {e["action"] for e in webhooks} == {"webhook.deleted"}
    for params in ({"limit": 0}, {"limit": 201}, {"before": 0}, {"action": "webhook.exploded"}):
        refused = audit_log(gateway, **params)
        assert refused.status_code == 422, (params, refused.text)
        assert refused.json()["error"]["code"] == "invalid_request"

    # The page lists the same entries, and refuses an unknown action with the error page.
    dashboard = Dashboard(gateway)
    page = dashboard.client.get("/settings/audit", params={"action": "webhook.deleted"})
    assert page.status_code == 200
    assert re.findall(r'data-audit-id="(\d+)"', page.text) == [str(e["id"]) for e in webhooks]
    assert dashboard.client.get("/settings/audit", params={"action": "nope"}).status_code == 422
    dashboard.client.close()


def test_a_channel_meta_refuses_is_paused_and_resumed_by_the_gateway(gateway: Gateway) -> None:
    before = newest_id(gateway)
    gateway.sim.configure(access_tokens=["a-token-no-channel-has"])
    try:
        waiting = gateway.otp(new_number()).json()["id"]
        wait_for(lambda: entries(gateway, action="channel.paused", limit=1), what="the pause's entry")
    finally:
        gateway.sim.configure(access_tokens=None)
    gateway.wait_status(waiting, "delivered")
    wait_for(lambda: len(since(gateway, before)) >= 2, what="the resume's entry")
    paused, resumed = since(gateway, before)
    assert (paused["action"], resumed["action"]) == ("channel.paused", "channel.resumed")
    for entry in (paused, resumed):
        assert entry["actor"]["type"] == "system" and entry["actor"]["user_id"] is None
        assert entry["target"] == {"type": "channel", "id": str(gateway.ids["main"])}
    assert paused["changes"]["reason"].startswith("190:")
