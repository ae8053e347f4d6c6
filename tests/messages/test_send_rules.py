"""Endpoint 4's checks: every 422 with its code, before anything is stored or sent."""

from __future__ import annotations

from typing import Any

import pytest

from support.harness import Gateway, new_number

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}


def error_of(response: Any, status: int = 422) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


@pytest.mark.parametrize(
    ("body", "field"),
    [
        # Exactly one of phone_number and user_id (API.md section 13): the body names both.
        ({"template": OTP}, "body"),
        ({"phone_number": "+994551234567", "user_id": "AZ.13491208655302741918", "template": OTP}, "body"),
        ({"user_id": "13491208655302741918", "template": OTP}, "user_id"),
        ({"user_id": "AZ.1349 1208", "template": OTP}, "user_id"),
        ({"phone_number": "+994551234567"}, "body"),
        ({"phone_number": "+994551234567", "template": OTP, "text": "hi"}, "body"),
        ({"phone_number": "+994551234567", "text": ""}, "text"),
        ({"phone_number": "+994551234567", "text": "x" * 4097}, "text"),
        ({"phone_number": "+994551234567", "template": {"name": "otp_code"}}, "template.language"),
        ({"phone_number": "+994551234567", "template": OTP, "fallback_template": OTP}, "body"),
        (
            {"phone_number": "+994551234567", "template": OTP, "conversation_status": "resolved"},
            "conversation_status",
        ),
        (
            {"phone_number": "+994551234567", "template": OTP, "status_callback": {"url": "ftp://x.example"}},
            "status_callback.url",
        ),
        (
            {
                "phone_number": "+994551234567",
                "template": OTP,
                "status_callback": {"url": "https://x.example", "after_seconds": 0},
            },
            "status_callback.after_seconds",
        ),
        (
            {
                "phone_number": "+994551234567",
                "template": OTP,
                "status_callback": {"url": "https://x.example", "after_seconds": 86401},
            },
            "status_callback.after_seconds",
        ),
        ({"phone_number": "+994551234567", "template": OTP, "unknown_field": 1}, "unknown_field"),
        ({"channel_id": "1", "phone_number": "+994551234567", "template": OTP}, "channel_id"),
    ],
)
def test_malformed_requests_are_invalid_request(gateway: Gateway, body: dict[str, Any], field: str) -> None:
    error = error_of(gateway.send(body))
    assert error["code"] == "invalid_request"
    assert field in [d["field"] for d in error["details"]]


def test_a_body_that_is_not_json_is_invalid_request(gateway: Gateway) -> None:
    response = gateway.http.post(
        gateway.v1("/whatsapp/messages"),
        content=b"{not json",
        headers=gateway.headers(**{"Content-Type": "application/json"}),
    )
    assert error_of(response)["code"] == "invalid_request"


@pytest.mark.parametrize("number", ["12345", "+1", "not a number", "+99455123", "+15550001111"])
def test_invalid_phone_numbers(gateway: Gateway, number: str) -> None:
    error = error_of(gateway.send({"phone_number": number, "template": OTP}))
    assert error["code"] == "invalid_phone_number"


def test_digits_without_plus_are_accepted_and_returned_as_e164(gateway: Gateway) -> None:
    number = new_number()
    response = gateway.send({"phone_number": number.removeprefix("+"), "template": OTP})
    assert response.status_code == 201, response.text
    assert gateway.message(response.json()["id"])["phone_number"] == number


def test_unknown_channel(gateway: Gateway) -> None:
    error = error_of(gateway.send({"channel_id": 987654, "phone_number": new_number(), "template": OTP}), 404)
    assert error["code"] == "channel_not_found"


@pytest.mark.parametrize(
    ("template", "code"),
    [
        ({"name": "no_such_template", "language": "en"}, "template_not_found"),
        ({"name": "otp_code", "language": "fr", "parameters": ["1"]}, "template_not_found"),
        ({"name": "new_feature", "language": "en"}, "template_not_approved"),
        ({"name": "old_promo", "language": "en"}, "template_not_approved"),
        ({"name": "otp_code", "language": "en"}, "template_parameters_mismatch"),
        ({"name": "otp_code", "language": "en", "parameters": ["1", "2"]}, "template_parameters_mismatch"),
        (
            {"name": "order_update", "language": "en", "parameters": {"1": "a"}},
            "template_parameters_mismatch",
        ),
        (
            {"name": "welcome_named", "language": "en", "parameters": {"first_name": "Ann", "order": "1"}},
            "template_parameters_mismatch",
        ),
        ({"name": "order_update", "language": "en", "parameters": ["a", ""]}, "template_parameters_mismatch"),
        ({"name": "filler_001", "language": "en", "parameters": ["extra"]}, "template_parameters_mismatch"),
    ],
)
def test_template_checks(gateway: Gateway, template: dict[str, Any], code: str) -> None:
    number = new_number()
    error = error_of(gateway.send({"phone_number": number, "template": template}))
    assert error["code"] == code
    assert error["details"][0]["field"].startswith("template")
    assert gateway.sim.messages(to=number) == []


def test_text_with_the_window_closed_and_no_fallback(gateway: Gateway) -> None:
    number = new_number()
    error = error_of(gateway.send({"phone_number": number, "text": "Hello"}))
    assert error["code"] == "window_closed"
    assert gateway.sim.messages(to=number) == []


def test_a_broken_fallback_is_refused_even_with_the_window_closed(gateway: Gateway) -> None:
    number = new_number()
    body = {
        "phone_number": number,
        "text": "Hello",
        "fallback_template": {"name": "new_feature", "language": "en"},
    }
    assert error_of(gateway.send(body))["code"] == "template_not_approved"


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/status", "http://localhost/status", "https://10.1.2.3/s", "http://[::1]/s"]
)
def test_a_status_callback_into_a_private_network_is_invalid_url(gateway: Gateway, url: str) -> None:
    number = new_number()
    body = {"phone_number": number, "template": OTP, "status_callback": {"url": url}}
    error = error_of(gateway.send(body))
    assert error["code"] == "invalid_url"
    assert error["details"][0]["field"] == "status_callback.url"
    assert gateway.sim.messages(to=number) == []


def test_an_integer_parameter_beyond_64_bits_must_be_sent_as_a_string(gateway: Gateway) -> None:
    number = new_number()
    template = {"name": "otp_code", "language": "en", "parameters": [10**30]}
    error = error_of(gateway.send({"phone_number": number, "template": template}))
    # Refused with every integer beyond 64 bits in a request (wagate.http.limits), naming the value.
    assert error["code"] == "invalid_request" and "string" in error["details"][0]["issue"]
    assert error["details"][0]["field"] == "template.parameters.0"
    template["parameters"] = [str(10**30)]
    response = gateway.send({"phone_number": number, "template": template})
    assert response.status_code == 201, response.text
    assert gateway.message(response.json()["id"])["template"]["parameters"] == [str(10**30)]


def test_a_number_sent_to_again_is_checked_the_same(gateway: Gateway) -> None:
    """The second send to a number is answered from the numbers checked recently: same E.164, same 422."""
    number = new_number()
    for _ in range(2):
        response = gateway.send({"phone_number": number.removeprefix("+"), "template": OTP})
        assert response.status_code == 201, response.text
        assert gateway.message(response.json()["id"])["phone_number"] == number
        assert error_of(gateway.send({"phone_number": "+99455123", "template": OTP}))["code"] == (
            "invalid_phone_number"
        )
