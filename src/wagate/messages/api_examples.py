"""The examples of the messages' operations in the OpenAPI document (/docs)."""

from __future__ import annotations

from typing import Any, cast

from wagate.messages.schemas import MessageListOut

MESSAGE_EXAMPLE: dict[str, Any] = cast(dict[str, Any], MessageListOut.model_config["json_schema_extra"])[
    "example"
]["data"][0]
DRY_RUN_EXAMPLE: dict[str, Any] = {
    "dry_run": True,
    "sent_as": "template",
    "preview": "123456 is your verification code.",
    "template": {
        "name": "otp_code",
        "language": "en",
        "category": "AUTHENTICATION",
        "parameters": ["123456"],
    },
    "cost": {"amount": "0.024", "currency": "AZN", "category": "AUTHENTICATION"},
    "window": {
        "channel_id": 1,
        "phone_number": "+994501234567",
        "user_id": None,
        "open": False,
        "last_customer_message_at": None,
        "expires_at": None,
        "seconds_remaining": 0,
    },
}
SEND_EXAMPLES: dict[str, Any] = {
    "otp": {
        "summary": "An OTP (authentication template)",
        "value": {
            "channel_id": 1,
            "phone_number": "+994501234567",
            "template": {"name": "otp_code", "language": "en", "parameters": ["123456"]},
        },
    },
    "text": {
        "summary": "Free-form text in the customer's window",
        "value": {"channel_id": 1, "phone_number": "+994501234567", "text": "Your order has shipped."},
    },
    "document": {
        "summary": "A template with a DOCUMENT header (an invoice)",
        "value": {
            "channel_id": 1,
            "phone_number": "+994501234567",
            "template": {
                "name": "invoice_ready",
                "language": "en",
                "parameters": {
                    "header": {
                        "link": "https://files.example.com/inv/1001.pdf",
                        "filename": "invoice-1001.pdf",
                    },
                    "1": "A-1001",
                },
            },
        },
    },
}
