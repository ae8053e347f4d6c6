"""The SQL of account webhooks and their deliveries."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.core.security import SecretBox
from wagate.events.models import Delivery, DeliveryAttempt, DeliveryState, Webhook


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


def webhook_by_id(session: Session, *, account_id: int, webhook_id: int) -> Webhook | None:
    found: Webhook | None = session.scalar(
        select(Webhook).where(Webhook.id == webhook_id, Webhook.account_id == account_id)
    )
    return found


async def find_webhook(session: AsyncSession, *, account_id: int, webhook_id: int) -> Webhook | None:
    found: Webhook | None = await session.scalar(
        select(Webhook).where(Webhook.id == webhook_id, Webhook.account_id == account_id)
    )
    return found


def delivery_of(session: Session, *, webhook_id: int, delivery_id: str) -> Delivery | None:
    found: Delivery | None = session.scalar(
        select(Delivery).where(Delivery.id == delivery_id, Delivery.webhook_id == webhook_id)
    )
    return found


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
