from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from wagate.whatsapp.outbound import (
    SendResult,
    TemplateRecord,
    authentication_components,
    body_component,
    template_message,
    text_message,
    text_parameter,
    url_button_component,
)
from wagate.whatsapp.payloads import MalformedWebhook, StatusKind
from wagate.whatsapp.webhook_body import parse_webhook

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def test_sent_status() -> None:
    [change] = parse_webhook(load("status_sent.json")).changes
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
    [change] = parse_webhook(load("status_failed.json")).changes
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
    changes = parse_webhook(load("inbound_text.json")).changes
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
    "body", [[], "x", {"object": "whatsapp_business_account"}, {"entry": {}}, {"entry": "x"}]
)
def test_only_a_body_that_is_no_webhook_at_all_raises(body: Any) -> None:
    with pytest.raises(MalformedWebhook):
        parse_webhook(body)
    assert issubclass(MalformedWebhook, ValueError)


def _messages_change(value: dict[str, Any]) -> dict[str, Any]:
    return {"entry": [{"id": "1", "changes": [{"field": "messages", "value": value}]}]}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"entry": [{"changes": "x"}]}, "entry[] must be an object with a list of changes"),
        ({"entry": [{"changes": [7]}]}, "entry[].changes[] must be an object"),
        (_messages_change({"statuses": []}), "value.metadata must be an object"),
        (_messages_change({"metadata": {}}), "value.metadata.phone_number_id must be a non-empty string"),
        (
            _messages_change({"metadata": {"phone_number_id": "1"}, "statuses": [{"id": "w"}]}),
            "statuses[].status must be a non-empty string",
        ),
        (
            _messages_change(
                {
                    "metadata": {"phone_number_id": "1"},
                    "statuses": [{"id": "w", "status": "sent", "timestamp": "soon"}],
                }
            ),
            "statuses[].timestamp must be Unix seconds",
        ),
        (
            _messages_change(
                {"metadata": {"phone_number_id": "1"}, "messages": [{"id": "wamid.1", "timestamp": "1"}]}
            ),
            "messages[] names no customer: no from, from_user_id or contact user_id",
        ),
        (
            _messages_change({"metadata": {"phone_number_id": "1"}, "statuses": {"id": "w"}}),
            "value.statuses must be a list",
        ),
    ],
)
def test_items_that_cannot_be_read_are_odd_and_the_rest_is_kept(body: Any, reason: str) -> None:
    good = {
        "id": "wamid.ok",
        "status": "delivered",
        "timestamp": "1750263800",
        "recipient_id": "994501234567",
    }
    body["entry"].append(
        {
            "id": "1",
            "changes": [
                {"field": "messages", "value": {"metadata": {"phone_number_id": "2"}, "statuses": [good]}}
            ],
        }
    )
    parsed = parse_webhook(body)
    assert [odd.reason for odd in parsed.odd] == [reason]
    assert [s.id for change in parsed.changes for s in change.statuses] == ["wamid.ok"]


def test_a_username_customer_is_known_by_user_id_and_statuses_carry_theirs() -> None:
    value = {
        "metadata": {"phone_number_id": "1"},
        "contacts": [
            {"user_id": "AZ.13491208655302741918", "profile": {"name": "Aysel", "username": "aysel"}}
        ],
        "messages": [
            {
                "from_user_id": "AZ.13491208655302741918",
                "id": "wamid.A",
                "timestamp": "1750263800",
                "type": "text",
                "text": {"body": "Salam"},
            }
        ],
        "statuses": [
            {
                "id": "wamid.B",
                "status": "read",
                "timestamp": "1750263801",
                "recipient_user_id": "AZ.99",
                "pricing": {"billable": False, "category": "utility", "type": "free_customer_service"},
            }
        ],
    }
    [change] = parse_webhook(_messages_change(value)).changes
    [message] = change.messages
    assert (message.from_, message.user_id, message.text) == (None, "AZ.13491208655302741918", "Salam")
    assert (message.customer.name, message.customer.username) == ("Aysel", "aysel")
    [status] = change.statuses
    assert (status.recipient_id, status.recipient_user_id, status.billable) == ("", "AZ.99", False)
    assert status.payload["id"] == "wamid.B"  # kept as sent, for parking


def test_user_preferences_are_read_for_marketing_messages_only() -> None:
    body = {
        "entry": [
            {
                "id": "1",
                "changes": [
                    {
                        "field": "user_preferences",
                        "value": {
                            "metadata": {"phone_number_id": "1"},
                            "contacts": [{"wa_id": "994501234567", "user_id": "AZ.1"}],
                            "user_preferences": [
                                {
                                    "wa_id": "994501234567",
                                    "detail": "x",
                                    "category": "marketing_messages",
                                    "value": "stop",
                                    "timestamp": "1750263800",
                                },
                                {
                                    "wa_id": "994501234567",
                                    "category": "something_else",
                                    "value": "x",
                                    "timestamp": "1750263800",
                                },
                            ],
                        },
                    }
                ],
            }
        ]
    }
    [change] = parse_webhook(body).changes
    [preference] = change.preferences
    assert (preference.customer.wa_id, preference.customer.user_id, preference.value) == (
        "994501234567",
        "AZ.1",
        "stop",
    )


def test_other_object_is_accepted_and_empty_entry_is_fine() -> None:
    assert parse_webhook({"object": "page", "entry": []}).changes == ()


def test_a_send_to_a_user_id_names_it_as_recipient() -> None:
    assert text_message("AZ.13491208655302741918", "hi")["recipient"] == "AZ.13491208655302741918"
    assert "to" not in text_message("AZ.13491208655302741918", "hi")
    assert text_message("+994501234567", "hi")["to"] == "994501234567"


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
