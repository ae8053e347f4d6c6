"""Account webhooks: registered by administrators, each with its own signing secret."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.accounts.actors import By, record_change
from wagate.audit.models import SECRET_SET, Actor, AuditAction, Via
from wagate.core.errors import DeliveryNotFound, WebhookDisabled, WebhookNotFound
from wagate.core.ids import new_id
from wagate.core.security import SecretBox
from wagate.core.units import detached
from wagate.events import publish, repository
from wagate.events.example_events import example_event_body
from wagate.events.models import Delivery, DeliveryAttempt, DeliveryKind, DeliveryState, EventKind, Webhook
from wagate.events.publish import NewDelivery, webhook_key_prefix, write_deliveries
from wagate.events.signing import SECRET_PREFIX
from wagate.events.subscriptions import forget_subscriptions
from wagate.events.urls import check_url
from wagate.runtime.gateway import Gateway

# Who acts when a caller does not say: the API's webhook endpoints, until they pass their principal.
UNSAID = Actor(Via.api_key)


def new_secret() -> str:
    """A Standard Webhooks secret: `whsec_` and the base64 of 32 random bytes (the signing key)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass(frozen=True)
class CreatedWebhook:
    """A new webhook and its signing secret: the only moment the secret is shown."""

    webhook: Webhook
    secret: str


def _webhook(session: Session, *, account_id: int, webhook_id: int) -> Webhook:
    webhook = repository.webhook_by_id(session, account_id=account_id, webhook_id=webhook_id)
    if webhook is None:
        raise WebhookNotFound()
    return webhook


def new_webhook(
    session: Session,
    *,
    account_id: int,
    url: str,
    events: Sequence[str],
    secret: str,
    box: SecretBox,
    by: By,
) -> Webhook:
    """Store a webhook, its secret encrypted, and its audit entry (which says a secret was set, never
    which)."""
    webhook = repository.create_webhook(
        session, account_id=account_id, url=url, events=events, secret=secret, box=box
    )
    record_change(
        session,
        by,
        account_id=account_id,
        action=AuditAction.webhook_created,
        target_type="webhook",
        target_id=webhook.id,
        changes={"url": webhook.url, "events": list(webhook.events), "secret": SECRET_SET},
    )
    return webhook


def update_webhook(
    session: Session,
    *,
    account_id: int,
    webhook_id: int,
    url: str | None = None,
    events: Sequence[str] | None = None,
    enabled: bool | None = None,
    by: By = UNSAID,
) -> Webhook:
    """Change what is given; each real change is audited (`webhook.updated` with the URL's or the
    events' before and after, `webhook.enabled` / `webhook.disabled`), a change to the same value not."""
    webhook = _webhook(session, account_id=account_id, webhook_id=webhook_id)
    changed: dict[str, Any] = {}
    if url is not None and url != webhook.url:
        changed["url"] = {"from": webhook.url, "to": url}
        webhook.url = url
    if events is not None and [str(e) for e in events] != list(webhook.events):
        changed["events"] = {"from": list(webhook.events), "to": [str(e) for e in events]}
        webhook.events = [str(e) for e in events]
    if changed:
        record_change(
            session,
            by,
            account_id=account_id,
            action=AuditAction.webhook_updated,
            target_type="webhook",
            target_id=webhook.id,
            changes=changed,
        )
    if enabled is not None and enabled != webhook.enabled:
        record_change(
            session,
            by,
            account_id=account_id,
            action=AuditAction.webhook_enabled if enabled else AuditAction.webhook_disabled,
            target_type="webhook",
            target_id=webhook.id,
            changes={"url": webhook.url, "previous_reason": webhook.disabled_reason}
            if enabled
            else {"url": webhook.url},
        )
        webhook.enabled = enabled
        # Enabled again: a fresh start. Disabled by hand: say so, in place of any earlier reason.
        webhook.disabled_reason = None if enabled else "Disabled by an administrator."
        webhook.consecutive_failures = 0
        webhook.failing_since = None
        if not enabled:
            publish.cancel_pending(session, [webhook.id])
    session.flush()
    return webhook


def redeliver(session: Session, *, account_id: int, webhook_id: int, delivery_id: str) -> Delivery:
    """Send a finished delivery again (same body, same `webhook-id`); a pending one is left as it is."""
    webhook = _webhook(session, account_id=account_id, webhook_id=webhook_id)
    if not webhook.enabled:
        raise WebhookDisabled()
    delivery = repository.delivery_of(session, webhook_id=webhook.id, delivery_id=delivery_id)
    if delivery is None:
        raise DeliveryNotFound()
    if delivery.state is not DeliveryState.pending:
        publish.redeliver(session, delivery)
    return delivery


async def list_webhooks(session: AsyncSession, *, account_id: int) -> list[Webhook]:
    return await repository.list_webhooks(session, account_id=account_id)


async def find_webhook(session: AsyncSession, *, account_id: int, webhook_id: int) -> Webhook:
    webhook = await repository.find_webhook(session, account_id=account_id, webhook_id=webhook_id)
    if webhook is None:
        raise WebhookNotFound()
    return webhook


async def webhook_deliveries(
    session: AsyncSession,
    *,
    account_id: int,
    webhook_id: int,
    state: DeliveryState | None = None,
    before: str | None = None,
    limit: int = 50,
) -> list[tuple[Delivery, list[DeliveryAttempt]]]:
    """A webhook's deliveries with their attempts, newest first (404 for another account's webhook)."""
    await find_webhook(session, account_id=account_id, webhook_id=webhook_id)
    return await repository.list_deliveries(
        session, account_id=account_id, webhook_id=webhook_id, state=state, before=before, limit=limit
    )


async def callback_deliveries(
    session: AsyncSession, *, account_id: int, message_id: str, limit: int = 50
) -> list[tuple[Delivery, list[DeliveryAttempt]]]:
    """A message's status_callback deliveries with their attempts, newest first."""
    return await repository.list_deliveries(
        session, account_id=account_id, message_id=message_id, limit=limit
    )


# The actions on account webhooks, as the API and the dashboard take them: the URL checked against
# the SSRF guard, one transaction, and this process's subscriptions forgotten so the change applies at
# once (other processes within 5 s).


async def add_webhook(
    gateway: Gateway, *, account_id: int, url: str, events: Sequence[str], by: By = UNSAID
) -> CreatedWebhook:
    checked = await check_url(url, allow_private=gateway.settings.allow_private_urls)
    secret = new_secret()
    webhook: Webhook = await gateway.db.write(
        lambda session: detached(
            session,
            new_webhook(
                session,
                account_id=account_id,
                url=checked,
                events=events,
                secret=secret,
                box=gateway.secret_box,
                by=by,
            ),
        )
    )
    forget_subscriptions(gateway.caches)
    return CreatedWebhook(webhook, secret)


async def change_webhook(
    gateway: Gateway,
    *,
    account_id: int,
    webhook_id: int,
    url: str | None = None,
    events: Sequence[str] | None = None,
    enabled: bool | None = None,
    by: By = UNSAID,
) -> Webhook:
    checked = None if url is None else await check_url(url, allow_private=gateway.settings.allow_private_urls)
    webhook: Webhook = await gateway.db.write(
        lambda session: detached(
            session,
            update_webhook(
                session,
                account_id=account_id,
                webhook_id=webhook_id,
                url=checked,
                events=events,
                enabled=enabled,
                by=by,
            ),
        )
    )
    forget_subscriptions(gateway.caches)
    return webhook


async def remove_webhook(gateway: Gateway, *, account_id: int, webhook_id: int, by: By = UNSAID) -> None:
    def unit(session: Session) -> None:
        webhook = _webhook(session, account_id=account_id, webhook_id=webhook_id)
        record_change(
            session,
            by,
            account_id=account_id,
            action=AuditAction.webhook_deleted,
            target_type="webhook",
            target_id=webhook.id,
            changes={"url": webhook.url, "events": list(webhook.events)},
        )
        session.delete(webhook)

    await gateway.db.write(unit)
    forget_subscriptions(gateway.caches)


async def redeliver_now(gateway: Gateway, *, account_id: int, webhook_id: int, delivery_id: str) -> Delivery:
    """Send a delivery again (same `webhook-id`), at once."""
    delivery: Delivery = await gateway.db.write(
        lambda session: detached(
            session, redeliver(session, account_id=account_id, webhook_id=webhook_id, delivery_id=delivery_id)
        )
    )
    gateway.dispatcher.wake_events()
    return delivery


def write_test_event(session: Session, *, account_id: int, webhook_id: int) -> Delivery:
    webhook = _webhook(session, account_id=account_id, webhook_id=webhook_id)
    if not webhook.enabled:
        raise WebhookDisabled("The webhook is disabled; enable it before sending it a test event.")
    taken = set(webhook.events)
    kind = next((k for k in EventKind if k.value in taken), EventKind.message_updated)
    delivery_id = new_id("evt")
    write_deliveries(
        session,
        [
            NewDelivery(
                account_id=account_id,
                kind=DeliveryKind(kind.value),
                body=example_event_body(kind, account_id),
                message_id=None,
                # Under the webhook's prefix: disabling the webhook cancels it like its other events.
                ordering_key=f"{webhook_key_prefix(webhook.id)}test:{delivery_id}",
                webhook_id=webhook.id,
                id=delivery_id,
            )
        ],
    )
    delivery = repository.delivery_of(session, webhook_id=webhook.id, delivery_id=delivery_id)
    if delivery is None:  # pragma: no cover - written just above, in this transaction
        raise DeliveryNotFound()
    return delivery


async def send_test_event(gateway: Gateway, *, account_id: int, webhook_id: int) -> Delivery:
    """Deliver a test event to one webhook now (404 for another account's, 409 `webhook_disabled`
    while it is disabled); the dashboard's `Send test event`."""
    delivery: Delivery = await gateway.db.write(
        lambda session: detached(
            session, write_test_event(session, account_id=account_id, webhook_id=webhook_id)
        )
    )
    gateway.dispatcher.wake_events()
    return delivery
