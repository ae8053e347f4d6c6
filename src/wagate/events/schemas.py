from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from wagate.db import isoformat
from wagate.events.models import EventKind, Webhook


class CreateWebhookRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=2000)
    events: list[EventKind] = Field(default_factory=lambda: [EventKind.message_updated], min_length=1)


def webhook_view(webhook: Webhook, *, secret: str | None = None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": webhook.id,
        "url": webhook.url,
        "events": webhook.events,
        "enabled": webhook.enabled,
        "disabled_reason": webhook.disabled_reason,
        "created_at": isoformat(webhook.created_at),
    }
    if secret is not None:
        view["secret"] = secret  # shown when the webhook is made; stored encrypted
    return view
