"""API.md section 8, account webhooks: administrators register them; each has its own whsec_ secret."""

from __future__ import annotations

import asyncio
import base64

import pytest

from support.harness import ADMIN_TOKEN, AGENT_TOKEN, OTHER_TOKEN, Gateway
from wagate.core.errors import InvalidUrl
from wagate.events.urls import check_url, forbidden_address

PUBLIC_URL = "https://93.184.215.14/hooks/wa"  # a public address literal: no DNS needed, no traffic sent


def hooks(gateway: Gateway, account_id: int | None = None) -> str:
    return gateway.v1("/webhooks", account_id)


def test_an_administrator_registers_lists_and_deletes_a_webhook(gateway: Gateway) -> None:
    created = gateway.http.post(
        hooks(gateway), json={"url": PUBLIC_URL, "events": ["message_updated"]}, headers=gateway.headers()
    )
    assert created.status_code == 201, created.text
    webhook = created.json()
    assert (
        webhook["url"] == PUBLIC_URL
        and webhook["events"] == ["message_updated"]
        and webhook["enabled"] is True
    )
    assert webhook["secret"].startswith("whsec_")
    assert len(base64.b64decode(webhook["secret"].removeprefix("whsec_"))) == 32

    listed = gateway.http.get(hooks(gateway), headers=gateway.headers()).json()["data"]
    mine = [w for w in listed if w["id"] == webhook["id"]]
    assert len(mine) == 1 and "secret" not in mine[0]

    deleted = gateway.http.delete(f"{hooks(gateway)}/{webhook['id']}", headers=gateway.headers())
    assert deleted.status_code == 204
    again = gateway.http.delete(f"{hooks(gateway)}/{webhook['id']}", headers=gateway.headers())
    assert again.status_code == 404 and again.json()["error"]["code"] == "webhook_not_found"


def test_events_default_to_message_updated_and_unknown_ones_are_refused(gateway: Gateway) -> None:
    default = gateway.http.post(hooks(gateway), json={"url": PUBLIC_URL}, headers=gateway.headers())
    assert default.status_code == 201 and default.json()["events"] == ["message_updated"]
    unknown = gateway.http.post(
        hooks(gateway), json={"url": PUBLIC_URL, "events": ["everything"]}, headers=gateway.headers()
    )
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "invalid_request"


def test_agents_and_other_accounts_are_refused(gateway: Gateway) -> None:
    for method in ("GET", "POST"):
        agent = gateway.http.request(
            method, hooks(gateway), json={"url": PUBLIC_URL}, headers=gateway.headers(AGENT_TOKEN)
        )
        assert agent.status_code == 403 and agent.json()["error"]["code"] == "administrator_required"
        other = gateway.http.request(
            method, hooks(gateway), json={"url": PUBLIC_URL}, headers=gateway.headers(OTHER_TOKEN)
        )
        assert other.status_code == 403 and other.json()["error"]["code"] == "forbidden"
    created = gateway.http.post(
        hooks(gateway), json={"url": PUBLIC_URL}, headers=gateway.headers(ADMIN_TOKEN)
    ).json()
    # Another tenant cannot see or delete it through its own account either.
    other_account = hooks(gateway, gateway.ids["globex"])
    assert all(
        w["id"] != created["id"]
        for w in gateway.http.get(other_account, headers=gateway.headers(OTHER_TOKEN)).json()["data"]
    )
    gone = gateway.http.delete(f"{other_account}/{created['id']}", headers=gateway.headers(OTHER_TOKEN))
    assert gone.status_code == 404


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://[::1]/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://172.16.5.4/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://224.0.0.1/hook",
        "ftp://93.184.215.14/hook",
        "not a url",
    ],
)
def test_urls_into_private_networks_are_refused(gateway: Gateway, url: str) -> None:
    response = gateway.http.post(hooks(gateway), json={"url": url}, headers=gateway.headers())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_url"


def test_the_guard_can_be_lifted_for_private_deployments() -> None:
    assert asyncio.run(check_url("http://127.0.0.1:9/x", allow_private=True)) == "http://127.0.0.1:9/x"
    with pytest.raises(InvalidUrl):
        asyncio.run(check_url("http://127.0.0.1:9/x", allow_private=False))
    assert forbidden_address("::ffff:10.0.0.1") and not forbidden_address("93.184.215.14")
