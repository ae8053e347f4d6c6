"""Account webhooks: registered by administrators, each with its own signing secret."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.errors import NotFound
from wagate.events.models import Webhook
from wagate.events.signing import SECRET_PREFIX
from wagate.security import SecretBox


class WebhookNotFound(NotFound):
    code = "webhook_not_found"
    message = "No webhook with this id exists in the account."


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


def delete_webhook(session: Session, *, account_id: int, webhook_id: int) -> None:
    webhook = session.scalar(
        select(Webhook).where(Webhook.id == webhook_id, Webhook.account_id == account_id)
    )
    if webhook is None:
        raise WebhookNotFound()
    session.delete(webhook)
    session.flush()
