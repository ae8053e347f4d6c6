from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from wagate.whatsapp.payloads import (
    MalformedWebhook,
    SendResult,
    StatusKind,
    TemplateRecord,
    authentication_components,
    body_component,
    parse_webhook,
    template_message,
    text_message,
    text_parameter,
    url_button_component,
)

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def test_sent_status() -> None:
    [change] = parse_webhook(load("status_sent.json"))
    assert change.phone_number_id == "106540352242922"
    assert change.waba_id == "102290129340398"
    assert change.display_phone_number == "15550783881"
    [status] = change.statuses
    assert status.status is StatusKind.SENT
    assert status.id.startswith("wamid.")
    assert status.timestamp == datetime(2025, 6, 18, 16, 22, 53, tzinfo=UTC)
    assert status.timestamp.tzinfo is UTC
    assert status.recipient_id == "994501234567"
    assert status.biz_opaque_callback_data == "msg_01J9Z3"
    assert status.pricing_category == "authentication"
    assert status.errors == ()
    assert change.messages == ()


def test_failed_status_and_unknown_status_kind() -> None:
    [change] = parse_webhook(load("status_failed.json"))
    failed, played = change.statuses
    assert failed.status is StatusKind.FAILED
    [error] = failed.errors
    assert (error.code, error.title, error.details) == (
        131026,
        "Message undeliverable",
        "Message Undeliverable.",
    )
    assert error.external_error == "131026: Message undeliverable"
    assert played.status is StatusKind.UNKNOWN
    assert played.raw_status == "played"


def test_inbound_text_with_profile_name_and_other_fields_skipped() -> None:
    changes = parse_webhook(load("inbound_text.json"))
    assert len(changes) == 1  # the template status change is not a "messages" change
    [message] = changes[0].messages
    assert message.from_ == "994501234567"
    assert message.type == "text"
    assert message.text == "Salam, where is my order?"
    assert message.profile_name == "Aysel Mammadova"
    assert message.timestamp == datetime.fromtimestamp(1750263800, UTC)


def test_status_kind_is_case_insensitive_and_total() -> None:
    assert StatusKind("DELIVERED") is StatusKind.DELIVERED
    assert StatusKind("something-new") is StatusKind.UNKNOWN


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"object": "whatsapp_business_account"},
        {"entry": {}},
        {"entry": [{"changes": "x"}]},
        {"entry": [{"changes": [{"field": "messages", "value": {"statuses": []}}]}]},
        {"entry": [{"changes": [{"field": "messages", "value": {"metadata": {}}}]}]},
        {
            "entry": [
                {
                    "changes": [
                        {
                            "field": "messages",
                            "value": {"metadata": {"phone_number_id": "1"}, "statuses": [{"id": "w"}]},
                        }
                    ]
                }
            ]
        },
        {
            "entry": [
                {
                    "changes": [
                        {
                            "field": "messages",
                            "value": {
                                "metadata": {"phone_number_id": "1"},
                                "statuses": [{"id": "w", "status": "sent", "timestamp": "soon"}],
                            },
                        }
                    ]
                }
            ]
        },
    ],
)
def test_malformed_bodies(body: Any) -> None:
    with pytest.raises(MalformedWebhook):
        parse_webhook(body)
    assert issubclass(MalformedWebhook, ValueError)


def test_other_object_is_accepted_and_empty_entry_is_fine() -> None:
    assert parse_webhook({"object": "page", "entry": []}) == []


def test_send_result() -> None:
    reply = {
        "messaging_product": "whatsapp",
        "contacts": [{"input": "+994501234567", "wa_id": "994501234567"}],
        "messages": [{"id": "wamid.X", "message_status": "accepted"}],
    }
    result = SendResult.from_dict(reply)
    assert (result.wamid, result.wa_id, result.message_status) == ("wamid.X", "994501234567", "accepted")
    with pytest.raises(ValueError):
        SendResult.from_dict({"messages": []})


def test_template_record_defaults() -> None:
    record = TemplateRecord.from_dict(
        {"name": "otp_code", "language": "en", "status": "APPROVED", "category": "AUTHENTICATION", "id": 42}
    )
    assert record.parameter_format == "POSITIONAL"
    assert record.components == []
    assert record.id == "42"
    named = TemplateRecord.from_dict(
        {
            "name": "w",
            "language": "en",
            "status": "approved",
            "category": "utility",
            "parameter_format": "NAMED",
            "components": [{"type": "BODY", "text": "Hi {{first_name}}"}],
        }
    )
    assert (named.status, named.category, named.parameter_format) == ("APPROVED", "UTILITY", "NAMED")
    with pytest.raises(ValueError):
        TemplateRecord.from_dict({"name": "x"})


def test_text_message_is_exactly_metas_json() -> None:
    assert text_message("+994501234567", "Hello", "msg_1") == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": "994501234567",
        "biz_opaque_callback_data": "msg_1",
        "type": "text",
        "text": {"body": "Hello"},
    }
    assert "biz_opaque_callback_data" not in text_message("994501234567", "Hello")


def test_template_message_is_exactly_metas_json() -> None:
    components = [body_component([text_parameter("A-1"), text_parameter("shipped")])]
    assert template_message("994501234567", "order_update", "en", components, "msg_2") == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": "994501234567",
        "biz_opaque_callback_data": "msg_2",
        "type": "template",
        "template": {
            "name": "order_update",
            "language": {"code": "en"},
            "components": [
                {
                    "type": "body",
                    "parameters": [{"type": "text", "text": "A-1"}, {"type": "text", "text": "shipped"}],
                }
            ],
        },
    }
    assert "components" not in template_message("994501234567", "filler_001", "en", [])["template"]


def test_authentication_components_carry_the_code_twice() -> None:
    assert authentication_components("123456") == [
        {"type": "body", "parameters": [{"type": "text", "text": "123456"}]},
        {
            "type": "button",
            "sub_type": "url",
            "index": "0",
            "parameters": [{"type": "text", "text": "123456"}],
        },
    ]
    assert url_button_component(1, "spring")["index"] == "1"
    assert text_parameter("Ann", "first_name") == {
        "type": "text",
        "text": "Ann",
        "parameter_name": "first_name",
    }
