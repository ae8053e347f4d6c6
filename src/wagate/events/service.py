"""Account webhooks: registered by administrators, each with its own signing secret."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.deps import Gateway
from wagate.errors import Conflict, NotFound
from wagate.events import publish
from wagate.events.models import Delivery, DeliveryAttempt, DeliveryState, Webhook
from wagate.events.schemas import delivery_view, webhook_view
from wagate.events.signing import SECRET_PREFIX
from wagate.events.urls import check_url
from wagate.security import SecretBox


class WebhookNotFound(NotFound):
    code = "webhook_not_found"
    message = "No webhook with this id exists in the account."


class DeliveryNotFound(NotFound):
    code = "delivery_not_found"
    message = "No delivery with this id exists for the webhook."


class WebhookDisabled(Conflict):
    code = "webhook_disabled"
    message = "The webhook is disabled; enable it before re-delivering its events."


def new_secret() -> str:
    """A Standard Webhooks secret: `whsec_` and the base64 of 32 random bytes (the signing key)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def create_webhook(
    session: Session, *, account_id: int, url: str, events: Sequence[str], secret: str, box: SecretBox
) -> Webhook:
    webhook = Webhook(
        account_id=account_id,
        url=url,
        events=[str(e) for e in events],
        secret_encrypted=box.encrypt(secret),
        enabled=True,
    )
    session.add(webhook)
    session.flush()
    return webhook


async def list_webhooks(session: AsyncSession, *, account_id: int) -> list[Webhook]:
    return list(
        await session.scalars(select(Webhook).where(Webhook.account_id == account_id).order_by(Webhook.id))
    )


def _webhook(session: Session, *, account_id: int, webhook_id: int) -> Webhook:
    webhook = session.scalar(
        select(Webhook).where(Webhook.id == webhook_id, Webhook.account_id == account_id)
    )
    if webhook is None:
        raise WebhookNotFound()
    return webhook


def delete_webhook(session: Session, *, account_id: int, webhook_id: int) -> None:
    session.delete(_webhook(session, account_id=account_id, webhook_id=webhook_id))
    session.flush()


def update_webhook(
    session: Session,
    *,
    account_id: int,
    webhook_id: int,
    url: str | None = None,
    events: Sequence[str] | None = None,
    enabled: bool | None = None,
) -> Webhook:
    webhook = _webhook(session, account_id=account_id, webhook_id=webhook_id)
    if url is not None:
        webhook.url = url
    if events is not None:
        webhook.events = [str(e) for e in events]
    if enabled is not None and enabled != webhook.enabled:
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
    delivery = session.scalar(
        select(Delivery).where(Delivery.id == delivery_id, Delivery.webhook_id == webhook.id)
    )
    if delivery is None:
        raise DeliveryNotFound()
    if delivery.state is not DeliveryState.pending:
        publish.redeliver(session, delivery)
    return delivery


async def list_deliveries(
    session: AsyncSession,
    *,
    account_id: int,
    webhook_id: int | None = None,
    message_id: str | None = None,
    state: DeliveryState | None = None,
    before: str | None = None,
    limit: int = 50,
) -> list[tuple[Delivery, list[DeliveryAttempt]]]:
    """Newest first: a webhook's deliveries, or (webhook_id None) a message's status_callback ones."""
    query = select(Delivery).where(Delivery.account_id == account_id)
    if webhook_id is not None:
        query = query.where(Delivery.webhook_id == webhook_id)
    else:
        query = query.where(Delivery.webhook_id.is_(None), Delivery.message_id == message_id)
    if state is not None:
        query = query.where(Delivery.state == state)
    if before is not None:
        query = query.where(Delivery.id < before)
    found = list(await session.scalars(query.order_by(Delivery.id.desc()).limit(limit)))
    attempts: dict[str, list[DeliveryAttempt]] = {d.id: [] for d in found}
    if found:
        rows = await session.scalars(
            select(DeliveryAttempt)
            .where(DeliveryAttempt.delivery_id.in_(attempts))
            .order_by(DeliveryAttempt.id)
        )
        for attempt in rows:
            attempts[attempt.delivery_id].append(attempt)
    return [(d, attempts[d.id]) for d in found]


async def find_webhook(session: AsyncSession, *, account_id: int, webhook_id: int) -> Webhook:
    webhook = await session.scalar(
        select(Webhook).where(Webhook.id == webhook_id, Webhook.account_id == account_id)
    )
    if webhook is None:
        raise WebhookNotFound()
    return webhook


# The actions on account webhooks, as the API and the dashboard take them: the URL checked against
# the SSRF guard, one transaction, and this process's subscriptions forgotten so the change applies at
# once (other processes within 5 s). Each returns the webhook's view (the secret only on creation).


async def add_webhook(
    gateway: Gateway, *, account_id: int, url: str, events: Sequence[str]
) -> dict[str, Any]:
    checked = await check_url(url, allow_private=gateway.settings.allow_private_urls)
    secret = new_secret()

    def unit(session: Session) -> dict[str, Any]:
        webhook = create_webhook(
            session, account_id=account_id, url=checked, events=events, secret=secret, box=gateway.secret_box
        )
        return webhook_view(webhook, secret=secret)

    view: dict[str, Any] = await gateway.db.write(unit)
    gateway.lookups.forget_subscriptions()
    return view


async def change_webhook(
    gateway: Gateway,
    *,
    account_id: int,
    webhook_id: int,
    url: str | None = None,
    events: Sequence[str] | None = None,
    enabled: bool | None = None,
) -> dict[str, Any]:
    checked = None if url is None else await check_url(url, allow_private=gateway.settings.allow_private_urls)

    def unit(session: Session) -> dict[str, Any]:
        webhook = update_webhook(
            session, account_id=account_id, webhook_id=webhook_id, url=checked, events=events, enabled=enabled
        )
        return webhook_view(webhook)

    view: dict[str, Any] = await gateway.db.write(unit)
    gateway.lookups.forget_subscriptions()
    return view


async def remove_webhook(gateway: Gateway, *, account_id: int, webhook_id: int) -> None:
    await gateway.db.write(
        lambda session: delete_webhook(session, account_id=account_id, webhook_id=webhook_id)
    )
    gateway.lookups.forget_subscriptions()


async def redeliver_now(
    gateway: Gateway, *, account_id: int, webhook_id: int, delivery_id: str
) -> dict[str, Any]:
    """Send a delivery again (same `webhook-id`), at once."""

    def unit(session: Session) -> dict[str, Any]:
        delivery = redeliver(session, account_id=account_id, webhook_id=webhook_id, delivery_id=delivery_id)
        return delivery_view(delivery)

    view: dict[str, Any] = await gateway.db.write(unit)
    gateway.dispatcher.wake_events()
    return view
