"""The simulated Graph API: request validation, template listing, rate limits and control endpoints."""

from __future__ import annotations

import time
from typing import Any

import phonenumbers
import pytest
from sim_harness import PHONE_NUMBER_ID, WABA_ID, Harness

from wagate.simulator import MAGIC_NUMBERS, Fault, fault_for
from wagate.simulator.send_log import max_in_window
from wagate.simulator.templates import SEED_TEMPLATES
from wagate.whatsapp.outbound import body_component, template_message, text_message, text_parameter

TO = "994501234567"


def error_of(harness: Harness, body: dict[str, Any], status: int) -> dict[str, Any]:
    response = harness.send(body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code", "fbtrace_id"}
    return dict(error)


def test_magic_numbers_are_valid_phone_numbers() -> None:
    assert len(MAGIC_NUMBERS) == len(set(n[-7:] for n in MAGIC_NUMBERS))
    for number, fault in MAGIC_NUMBERS.items():
        parsed = phonenumbers.parse(number)
        assert phonenumbers.is_valid_number(parsed), number
        assert phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164) == number
        assert fault_for(number.lstrip("+")) is fault
    assert fault_for("+994501234567") is None
    assert fault_for("12") is None
    assert fault_for("+447700001026") is Fault.UNDELIVERABLE  # the suffix decides, whatever the country


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"messaging_product": "sms", "to": TO, "type": "text", "text": {"body": "x"}}, 100),
        ({"messaging_product": "whatsapp", "to": "abc", "type": "text", "text": {"body": "x"}}, 131009),
        ({"messaging_product": "whatsapp", "to": TO, "type": "text", "text": {"body": ""}}, 100),
        ({"messaging_product": "whatsapp", "to": TO, "type": "text", "text": {"body": "x" * 4097}}, 100),
        ({"messaging_product": "whatsapp", "to": TO, "type": "text"}, 100),
        ({"messaging_product": "whatsapp", "to": TO, "type": "image"}, 100),
        (text_message(TO, "x", "y" * 513), 100),
        (
            {"messaging_product": "whatsapp", "to": TO, "type": "template", "template": {"name": "otp_code"}},
            131008,
        ),
    ],
)
def test_invalid_requests(harness: Harness, body: dict[str, Any], code: int) -> None:
    assert error_of(harness, body, 400)["code"] == code


def test_text_of_4096_characters_and_plus_in_to_are_accepted(harness: Harness) -> None:
    response = harness.send(text_message("+" + TO, "x" * 4096) | {"to": "+" + TO})
    assert response.status_code == 200
    assert response.json()["contacts"] == [{"input": "+" + TO, "wa_id": TO}]


def test_template_errors(harness: Harness) -> None:
    missing = error_of(harness, template_message(TO, "order_update", "fr"), 404)
    assert missing["code"] == 132001
    assert missing["message"] == "(#132001) Template name does not exist in the translation"
    assert missing["error_data"]["details"] == "template name (order_update) does not exist in fr"
    assert error_of(harness, template_message(TO, "old_promo", "en"), 404)["code"] == 132001
    assert error_of(harness, template_message(TO, "order_update", "en"), 400)["code"] == 132000
    wrong_names = [body_component([text_parameter("Ann", "first_name"), text_parameter("A-7", "order")])]
    assert error_of(harness, template_message(TO, "welcome_named", "en", wrong_names), 400)["code"] == 131008
    extra_button = [
        body_component([text_parameter("A"), text_parameter("B")]),
        {"type": "button", "sub_type": "url", "index": "0", "parameters": [text_parameter("x")]},
    ]
    assert error_of(harness, template_message(TO, "order_update", "en", extra_button), 400)["code"] == 131009


def test_bearer_token_is_required(harness: Harness) -> None:
    response = harness.http.post(
        f"{harness.graph_url}/{PHONE_NUMBER_ID}/messages", json=text_message(TO, "x")
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == 190


def list_page(harness: Harness, url: str | None = None, **params: Any) -> dict[str, Any]:
    response = harness.http.get(
        url or f"{harness.graph_url}/{WABA_ID}/message_templates",
        params=params or None,
        headers={"Authorization": "Bearer token"},
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_template_listing_pages_with_cursors(harness: Harness) -> None:
    first = list_page(harness)
    assert len(first["data"]) == 25  # Meta's default page size
    assert set(first["paging"]["cursors"]) == {"before", "after"}
    second = list_page(harness, first["paging"]["next"])
    assert len(second["data"]) == len(SEED_TEMPLATES) - 25
    assert "next" not in second["paging"]
    names = [(t["name"], t["language"]) for t in first["data"] + second["data"]]
    assert len(set(names)) == len(SEED_TEMPLATES)
    assert ("order_update", "az") in names

    fields = "name,language,status,category,parameter_format,components,id"
    page = list_page(harness, fields="name,status", limit=5)
    assert all(set(t) == {"name", "status", "id"} for t in page["data"])
    assert "fields=name%2Cstatus" in page["paging"]["next"] or "fields=name,status" in page["paging"]["next"]
    full = list_page(harness, fields=fields, limit=100)
    otp = next(t for t in full["data"] if t["name"] == "otp_code")
    assert otp["category"] == "AUTHENTICATION"
    assert otp["components"][2] == {
        "type": "BUTTONS",
        "buttons": [{"type": "OTP", "otp_type": "COPY_CODE", "text": "Copy code"}],
    }
    assert "paging" in full and "next" not in full["paging"]


def test_replaced_templates_apply_to_the_registered_number(harness: Harness) -> None:
    harness.control(
        "PUT",
        f"/_sim/templates/{WABA_ID}",
        json={
            "data": [
                {
                    "name": "only_one",
                    "language": "en",
                    "status": "APPROVED",
                    "category": "UTILITY",
                    "components": [{"type": "BODY", "text": "Hello {{1}}"}],
                }
            ]
        },
    )
    listing = list_page(harness)
    assert [t["name"] for t in listing["data"]] == ["only_one"]
    assert listing["data"][0]["id"] and listing["data"][0]["parameter_format"] == "POSITIONAL"
    ok = harness.send(template_message(TO, "only_one", "en", [body_component([text_parameter("Ann")])]))
    assert ok.status_code == 200
    assert error_of(harness, template_message(TO, "otp_code", "en"), 404)["code"] == 132001
    # An unregistered number gets its own, seeded WABA.
    other = harness.send(template_message(TO, "filler_001", "en"), phone_number_id="999")
    assert other.status_code == 200
    harness.control("POST", "/_sim/reset")
    assert len(list_page(harness)["data"]) == 25


def test_rate_limit_per_second_and_stats(harness: Harness) -> None:
    harness.control("POST", "/_sim/config", json={"rate_limit_per_second": 5, "auto_statuses": False})
    responses = []
    for i in range(50):
        responses.append(harness.send(text_message(TO, str(i))))
        if responses[-1].status_code != 200:
            break
    codes = [r.status_code for r in responses]
    # The window cannot be full before five sends were accepted; a slow machine may accept more.
    assert codes[:5] == [200] * 5
    assert codes[-1] == 400
    assert responses[-1].json()["error"]["code"] == 130429
    stats = harness.control("GET", "/_sim/stats")["phone_number_ids"][PHONE_NUMBER_ID]
    assert stats["total"] == codes.count(200)
    assert stats["max_in_any_1s_window"] <= 5
    assert sum(stats["per_second"].values()) == stats["total"]
    time.sleep(1.0)
    assert harness.send(text_message(TO, "later")).status_code == 200


def test_messages_log_filters_and_reset(harness: Harness) -> None:
    harness.control("POST", "/_sim/config", json={"auto_statuses": False})
    harness.send(text_message(TO, "a", "m1"))
    harness.send(text_message("994551234567", "b", "m2"), phone_number_id="555")
    assert len(harness.control("GET", "/_sim/messages")["data"]) == 2
    [entry] = harness.control("GET", "/_sim/messages", params={"phone_number_id": "555"})["data"]
    assert (
        entry["to"] == "994551234567"
        and entry["type"] == "text"
        and entry["biz_opaque_callback_data"] == "m2"
    )
    assert entry["received_at_iso"].endswith("Z")
    assert harness.control("GET", "/_sim/messages", params={"to": "+" + TO})["data"][0]["body"]["text"] == {
        "body": "a"
    }
    config = harness.control("POST", "/_sim/reset")
    assert config == {"ok": True}
    assert harness.control("GET", "/_sim/messages")["data"] == []
    after = harness.control("GET", "/_sim/config")
    assert after["auto_statuses"] is True  # behaviour switches are back to the startup values
    assert after["webhook_url"].endswith("/hook")  # wiring stays
    channels = harness.control("GET", "/_sim/channels")["data"]
    assert {
        "phone_number_id": PHONE_NUMBER_ID,
        "waba_id": WABA_ID,
        "display_phone_number": "15550001111",
    } in channels


def test_config_rejects_unknown_switches(harness: Harness) -> None:
    response = harness.http.post(harness.sim.base_url + "/_sim/config", json={"reoder_statuses": True})
    assert response.status_code == 422
    config = harness.control(
        "POST", "/_sim/config", json={"status_delays": {"read": 1.5}, "rate_limit_per_second": 80}
    )
    assert config["status_delays"]["read"] == 1.5
    assert config["status_delays"]["sent"] == 0.01
    assert config["rate_limit_per_second"] == 80
    assert "app_secret" not in config
    assert (
        harness.control("POST", "/_sim/config", json={"rate_limit_per_second": None})["rate_limit_per_second"]
        is None
    )


def test_max_in_window_is_a_sliding_half_open_second() -> None:
    assert max_in_window([]) == 0
    assert max_in_window([0.0, 0.5, 0.99, 1.0, 1.5]) == 3
    assert max_in_window([2.0, 0.0, 1.0]) == 1
