"""What the webhook settings pages show (`settings_webhooks`), made from what the events service
returns: a webhook with its events, a page of its deliveries with their attempts, and the webhook form
read back with its refusal in the page's words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from wagate.accounts.service import SessionUser
from wagate.core.errors import WagateError
from wagate.events import service
from wagate.events.models import Delivery, DeliveryAttempt, DeliveryState, EventKind, Webhook
from wagate.runtime.gateway import Gateway

EVENT_LABELS: dict[str, str] = {
    EventKind.message_updated.value: "Message updated",
    EventKind.message_created.value: "Message created",
    EventKind.conversation_status_changed.value: "Conversation status changed",
    EventKind.batch_completed.value: "Batch completed",
    EventKind.template_updated.value: "Template updated",
}
STATE_LABELS = {
    DeliveryState.pending.value: "Pending",
    DeliveryState.delivered.value: "Delivered",
    DeliveryState.failed.value: "Failed",
}


@dataclass(frozen=True)
class AttemptItem:
    at: Any
    succeeded: bool
    status_code: int | None
    latency_ms: int
    error: str | None
    response: str | None


@dataclass(frozen=True)
class DeliveryItem:
    id: str
    event: str
    state: str
    state_label: str
    test: bool
    created_at: Any
    finished_at: Any
    attempts: list[AttemptItem]
    payload: str  # indented JSON

    @property
    def last(self) -> AttemptItem | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def finished(self) -> bool:
        return self.state != DeliveryState.pending.value


def delivery_item(delivery: Delivery, attempts: Sequence[DeliveryAttempt]) -> DeliveryItem:
    body = delivery.body if isinstance(delivery.body, dict) else {}
    return DeliveryItem(
        id=delivery.id,
        event=EVENT_LABELS.get(delivery.kind.value, delivery.kind.value),
        state=delivery.state.value,
        state_label=STATE_LABELS[delivery.state.value],
        test=body.get("test") is True,
        created_at=delivery.created_at,
        finished_at=delivery.finished_at,
        attempts=[
            AttemptItem(a.attempted_at, a.succeeded, a.status_code, a.latency_ms, a.error, a.response)
            for a in attempts
        ],
        payload=orjson.dumps(delivery.body, option=orjson.OPT_INDENT_2).decode(),
    )


@dataclass(frozen=True)
class DeliveryPage:
    webhook_id: int
    items: list[DeliveryItem]
    next_before: str | None  # the id to list older ones from, when there are more
    before: str | None  # this page's cursor (None: the newest)
    limit: int
    enabled: bool

    @property
    def poll(self) -> bool:
        """Fetch again while something may change soon: the newest page of an enabled webhook that
        has no delivery yet or one under way."""
        waiting = not self.items or any(not d.finished for d in self.items)
        return self.enabled and self.before is None and waiting


@dataclass(frozen=True)
class WebhookItem:
    id: int
    url: str
    events: list[str]  # labels
    event_values: list[str]
    enabled: bool
    disabled_reason: str | None
    consecutive_failures: int
    failing_since: Any
    created_at: Any


def webhook_item(webhook: Webhook) -> WebhookItem:
    values = [e for e in EVENT_LABELS if e in webhook.events]
    return WebhookItem(
        id=webhook.id,
        url=webhook.url,
        events=[EVENT_LABELS[e] for e in values],
        event_values=values,
        enabled=webhook.enabled,
        disabled_reason=webhook.disabled_reason,
        consecutive_failures=webhook.consecutive_failures or 0,
        failing_since=webhook.failing_since,
        created_at=webhook.created_at,
    )


@dataclass(frozen=True)
class WebhookForm:
    """What the administrator typed, shown again with the error when it is refused."""

    url: str = ""
    events: tuple[str, ...] = (EventKind.message_updated.value,)
    error: str | None = None
    field: str | None = None  # `url` or `events`: the input the error is about


def posted_webhook(form: Mapping[str, str]) -> tuple[str, list[str]]:
    """The URL and the ticked events (`event:<kind>` checkboxes, since a form field keeps one value)."""
    events = [kind for kind in EVENT_LABELS if form.get(f"event:{kind}")]
    return form.get("url", "").strip(), events


def form_refusal(exc: ValidationError) -> tuple[str, str]:
    """The first problem of a refused form, in the page's words, and the field it is about."""
    error = exc.errors()[0]
    field = str(error.get("loc", ("url",))[0])
    if field == "events":
        return "Choose at least one event.", "events"
    if error.get("type") == "string_too_short":
        return "Enter the URL the events are to be posted to.", "url"
    issue = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    return f"The URL is not valid: {issue}.", "url"


def error_field(error: WagateError) -> str:
    fields = {str(d.get("field")) for d in error.details or []}
    return "events" if "events" in fields else "url"


async def deliveries_of(
    gateway: Gateway, user: SessionUser, webhook: WebhookItem, *, before: str | None, limit: int
) -> DeliveryPage:
    async with gateway.db.read() as session:
        found = await service.webhook_deliveries(
            session,
            account_id=user.principal.account_id,
            webhook_id=webhook.id,
            before=before,
            limit=limit + 1,
        )
    shown = found[:limit]
    return DeliveryPage(
        webhook_id=webhook.id,
        items=[delivery_item(d, a) for d, a in shown],
        next_before=shown[-1][0].id if len(found) > limit else None,
        before=before,
        limit=limit,
        enabled=webhook.enabled,
    )


async def webhook_of(gateway: Gateway, user: SessionUser, webhook_id: int) -> WebhookItem:
    async with gateway.db.read() as session:
        found = await service.find_webhook(
            session, account_id=user.principal.account_id, webhook_id=webhook_id
        )
    return webhook_item(found)
