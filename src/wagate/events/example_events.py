"""The bodies of test events: what `Send test event` delivers to a webhook, one example of each kind
of event in the shape of the real one."""

from __future__ import annotations

from typing import Any

from wagate.core.db import isoformat, utcnow
from wagate.core.ids import new_id
from wagate.events.models import EventKind

# A test event: an example of an event the webhook takes, in the shape of the real one, marked
# `"test": true`, with ids that match nothing (numbers 0, fresh `msg_`/`bat_` ids, a fictional number).
# It is delivered like every event (signed, retried, listed with the deliveries, re-deliverable), so
# it shows whether the endpoint takes what the gateway sends.
_TEST_NUMBER = "+15555550100"


def _example_message(status: str, at: str) -> dict[str, Any]:
    return {
        "id": new_id("msg"),
        "channel_id": 0,
        "phone_number": _TEST_NUMBER,
        "user_id": None,
        "status": status,
        "sent_as": "template",
        "template": {
            "name": "otp_code",
            "language": "en",
            "category": "AUTHENTICATION",
            "parameters": ["123456"],
        },
        "text": None,
        "conversation": {"id": 0, "status": "resolved", "handled_by": "app"},
        "cost": {"amount": "0.00", "currency": "AZN", "category": "AUTHENTICATION"},
        "batch_id": None,
        "upstream_message_id": None,
        "upstream_status": None,
        "status_history": [{"status": "sent", "at": at}]
        + ([{"status": status, "at": at}] if status != "sent" else []),
        "created_at": at,
        "updated_at": at,
    }


def example_event_body(kind: EventKind, account_id: int) -> dict[str, Any]:
    """The body of a test event of `kind` for the account."""
    at = isoformat(utcnow()) or ""
    body: dict[str, Any] = {"event": kind.value, "account_id": account_id, "test": True}
    if kind is EventKind.message_updated:
        body.update(previous_status="sent", message=_example_message("delivered", at))
    elif kind is EventKind.message_created:
        body.update(direction="outbound", message=_example_message("sent", at))
    elif kind is EventKind.conversation_status_changed:
        body.update(
            previous_status="open",
            conversation={
                "id": 0,
                "channel_id": 0,
                "phone_number": _TEST_NUMBER,
                "user_id": None,
                "status": "resolved",
            },
        )
    elif kind is EventKind.template_updated:
        body.update(
            template={
                "channel_id": 0,
                "name": "order_update",
                "language": "en",
                "category": "UTILITY",
                "status": "PAUSED",
                "quality": "RED",
                "pending_category": None,
                "rejected_reason": "Your WhatsApp message template has been paused for 3 hours.",
                "parameter_format": "POSITIONAL",
                "header_format": None,
                "variables": ["1", "2"],
                "components": [{"type": "BODY", "text": "Your order {{1}} is now {{2}}."}],
            },
            changes={"status": {"from": "APPROVED", "to": "PAUSED"}},
        )
    else:
        body["batch"] = {
            "batch_id": new_id("bat"),
            "channel_id": 0,
            "template": {"name": "order_update", "language": "en", "category": "UTILITY"},
            "total": 1,
            "accepted": 1,
            "rejected": 0,
            "counts": {"pending": 0, "sent": 0, "delivered": 1, "read": 0, "failed": 0, "rejected": 0},
            "cost": {"amount": "0.00", "currency": "AZN"},
            "created_at": at,
            "completed_at": at,
        }
    return body
