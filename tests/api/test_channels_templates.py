"""Endpoints 1 and 2: channels the key's user is a member of, and their synced templates."""

from __future__ import annotations

from support.harness import AGENT_TOKEN, OUTSIDER_TOKEN, Gateway


def test_channels_lists_only_member_inboxes(gateway: Gateway) -> None:
    response = gateway.http.get(gateway.v1("/whatsapp/channels"), headers=gateway.headers())
    assert response.status_code == 200
    assert response.json() == {
        "data": [
            {
                "channel_id": gateway.ids["main"],
                "name": "Main",
                "phone_number": "+15550001111",
                "provider": "whatsapp_cloud",
                "messages_per_second": 80,
            },
            {
                "channel_id": gateway.ids["second"],
                "name": "Second",
                "phone_number": "+15550002222",
                "provider": "whatsapp_cloud",
                "messages_per_second": 80,
            },
        ]
    }
    agent = gateway.http.get(gateway.v1("/whatsapp/channels"), headers=gateway.headers(AGENT_TOKEN)).json()
    assert [c["channel_id"] for c in agent["data"]] == [gateway.ids["main"]]


def templates(gateway: Gateway, token: str | None = None, **params: object) -> list[dict[str, object]]:
    response = gateway.http.get(
        gateway.v1("/whatsapp/templates"), params=params, headers=gateway.headers(token or AGENT_TOKEN)
    )
    assert response.status_code == 200, response.text
    data: list[dict[str, object]] = response.json()["data"]
    return data


def test_templates_are_synced_with_their_variables(gateway: Gateway) -> None:
    by_key = {(t["name"], t["language"]): t for t in templates(gateway)}
    # The simulator's WABA pages its listing 25 at a time; all of them arrived.
    assert len(by_key) > 30
    otp = by_key[("otp_code", "en")]
    assert otp["category"] == "AUTHENTICATION" and otp["status"] == "APPROVED"
    assert otp["variables"] == ["1"]  # the copy-code button is filled from the code, not listed
    assert otp["channel_id"] == gateway.ids["main"]
    assert by_key[("order_update", "en")]["variables"] == ["1", "2"]
    assert by_key[("spring_sale", "en")]["variables"] == ["1", "header.1", "button.0"]
    named = by_key[("welcome_named", "en")]
    assert named["parameter_format"] == "NAMED"
    assert named["variables"] == ["first_name", "order_id"]
    assert by_key[("new_feature", "en")]["status"] == "PENDING"
    assert isinstance(otp["components"], list) and otp["components"]


def test_templates_filter_by_query(gateway: Gateway) -> None:
    assert {t["language"] for t in templates(gateway, name="order_update")} == {"en", "az"}
    assert [t["name"] for t in templates(gateway, name="order_update", language="az")] == ["order_update"]
    assert {t["category"] for t in templates(gateway, category="MARKETING")} == {"MARKETING"}
    assert {t["status"] for t in templates(gateway, status="rejected")} == {"REJECTED"}
    main_only = templates(gateway, token=None, channel_id=gateway.ids["main"])
    assert {t["channel_id"] for t in main_only} == {gateway.ids["main"]}


def test_templates_of_a_channel_need_membership(gateway: Gateway) -> None:
    response = gateway.http.get(
        gateway.v1("/whatsapp/templates"),
        params={"channel_id": gateway.ids["main"]},
        headers=gateway.headers(OUTSIDER_TOKEN),
    )
    assert response.status_code == 403
    response = gateway.http.get(
        gateway.v1("/whatsapp/templates"), params={"channel_id": 424242}, headers=gateway.headers()
    )
    assert response.status_code == 404 and response.json()["error"]["code"] == "channel_not_found"
