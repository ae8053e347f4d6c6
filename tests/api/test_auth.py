"""API.md conventions: 401 for a missing, unknown or revoked key; 403 for another account or inbox."""

from __future__ import annotations

import pytest

from support.harness import (
    ADMIN_TOKEN,
    AGENT_TOKEN,
    OTHER_TOKEN,
    OUTSIDER_TOKEN,
    REVOKED_TOKEN,
    Gateway,
    new_number,
)

ENDPOINTS = [
    ("GET", "/whatsapp/channels"),
    ("GET", "/whatsapp/templates"),
    ("GET", "/whatsapp/messages/window?channel_id=1&phone_number=%2B994551234567"),
    ("POST", "/whatsapp/messages"),
    ("GET", "/whatsapp/messages/msg_unknown"),
]


def assert_error(response, status: int, code: str) -> None:  # type: ignore[no-untyped-def]
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer wg_not_a_key", f"Basic {ADMIN_TOKEN}", f"Bearer {REVOKED_TOKEN}"],
)
def test_every_endpoint_needs_a_valid_key(
    gateway: Gateway, method: str, path: str, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    response = gateway.http.request(method, gateway.v1(path), headers=headers, json={})
    assert_error(response, 401, "unauthorized")


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_another_accounts_id_is_forbidden(gateway: Gateway, method: str, path: str) -> None:
    for account_id in (gateway.ids["globex"], 999_999):
        response = gateway.http.request(
            method, gateway.v1(path, account_id), headers=gateway.headers(ADMIN_TOKEN), json={}
        )
        assert_error(response, 403, "forbidden")


def test_a_non_member_cannot_send_through_the_inbox(gateway: Gateway) -> None:
    response = gateway.send(
        {
            "phone_number": new_number(),
            "template": {"name": "otp_code", "language": "en", "parameters": ["1"]},
        },
        token=OUTSIDER_TOKEN,
    )
    assert_error(response, 403, "forbidden")


def test_a_non_member_cannot_read_the_inbox_messages_or_window(gateway: Gateway) -> None:
    number = new_number()
    message_id = gateway.otp(number).json()["id"]
    response = gateway.http.get(
        gateway.v1(f"/whatsapp/messages/{message_id}"), headers=gateway.headers(OUTSIDER_TOKEN)
    )
    assert_error(response, 403, "forbidden")
    response = gateway.http.get(
        gateway.v1("/whatsapp/messages/window"),
        params={"channel_id": gateway.ids["main"], "phone_number": number},
        headers=gateway.headers(OUTSIDER_TOKEN),
    )
    assert_error(response, 403, "forbidden")


def test_another_tenants_message_is_not_found(gateway: Gateway) -> None:
    message_id = gateway.otp(new_number()).json()["id"]
    response = gateway.http.get(
        gateway.v1(f"/whatsapp/messages/{message_id}", gateway.ids["globex"]),
        headers=gateway.headers(OTHER_TOKEN),
    )
    assert_error(response, 404, "message_not_found")


def test_another_tenants_channel_is_not_found(gateway: Gateway) -> None:
    response = gateway.send(
        {
            "channel_id": gateway.ids["globex_channel"],
            "phone_number": new_number(),
            "template": {"name": "otp_code", "language": "en", "parameters": ["1"]},
        }
    )
    assert_error(response, 404, "channel_not_found")


def test_agents_with_membership_may_send(gateway: Gateway) -> None:
    response = gateway.send(
        {
            "phone_number": new_number(),
            "template": {"name": "otp_code", "language": "en", "parameters": ["42"]},
        },
        token=AGENT_TOKEN,
    )
    assert response.status_code == 201, response.text


def test_unknown_routes_and_methods_use_the_error_body(gateway: Gateway) -> None:
    assert_error(gateway.http.get(f"{gateway.url}/v1/nothing-here"), 404, "not_found")
    response = gateway.http.delete(gateway.v1("/whatsapp/channels"), headers=gateway.headers())
    assert_error(response, 405, "method_not_allowed")


def test_openapi_is_published(gateway: Gateway) -> None:
    spec = gateway.http.get(f"{gateway.url}/openapi.json").json()
    assert "/v1/accounts/{account_id}/whatsapp/messages" in spec["paths"]
    assert gateway.http.get(f"{gateway.url}/docs").status_code == 200


def test_health_and_readiness(gateway: Gateway) -> None:
    assert gateway.http.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    assert gateway.http.get(f"{gateway.url}/readyz").json()["status"] == "ready"
