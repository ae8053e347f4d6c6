from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, StrictBool

from wagate.core.db import isoformat
from wagate.events.models import Delivery, DeliveryAttempt, EventKind, Webhook
from wagate.http.limits import RequestBody


class CreateWebhookRequest(RequestBody):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=2000)
    events: list[EventKind] = Field(default_factory=lambda: [EventKind.message_updated], min_length=1)


class UpdateWebhookRequest(RequestBody):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, min_length=1, max_length=2000)
    events: list[EventKind] | None = Field(None, min_length=1)
    enabled: StrictBool | None = Field(None, description="true enables a disabled webhook again")


def webhook_view(webhook: Webhook, *, secret: str | None = None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": webhook.id,
        "url": webhook.url,
        "events": webhook.events,
        "enabled": webhook.enabled,
        "disabled_reason": webhook.disabled_reason,
        "consecutive_failures": webhook.consecutive_failures or 0,
        "failing_since": isoformat(webhook.failing_since),
        "created_at": isoformat(webhook.created_at),
    }
    if secret is not None:
        view["secret"] = secret  # shown when the webhook is made; stored encrypted
    return view


def delivery_view(delivery: Delivery, attempts: list[DeliveryAttempt] | None = None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": delivery.id,  # the `webhook-id` header of every attempt
        "event": delivery.kind.value,
        "message_id": delivery.message_id,
        "state": delivery.state.value,
        "created_at": isoformat(delivery.created_at),
        "finished_at": isoformat(delivery.finished_at),
        "payload": delivery.body,
    }
    if attempts is not None:
        view["attempts"] = [
            {
                "at": isoformat(a.attempted_at),
                "succeeded": a.succeeded,
                "status_code": a.status_code,
                "latency_ms": a.latency_ms,
                "error": a.error,
                "response": a.response,
            }
            for a in attempts
        ]
    return view


# An OpenAPI example of a delivery (both the webhook and the status callback lists show it).
DELIVERY_EXAMPLE: dict[str, Any] = {
    "id": "evt_01jdx3k6q8v2m4n5p6r7s8t9va",
    "event": "message_updated",
    "message_id": "msg_01jdx3k6q8v2m4n5p6r7s8t9va",
    "state": "succeeded",
    "created_at": "2026-11-24T09:30:01Z",
    "finished_at": "2026-11-24T09:30:01Z",
    "payload": {"type": "message_updated", "data": {"id": "msg_01jdx3k6q8v2m4n5p6r7s8t9va"}},
    "attempts": [
        {
            "at": "2026-11-24T09:30:01Z",
            "succeeded": True,
            "status_code": 200,
            "latency_ms": 42,
            "error": None,
            "response": "ok",
        }
    ],
}
