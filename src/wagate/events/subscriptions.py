"""Who takes which events: a snapshot of every enabled webhook, cached like the other lookups.

Status changes come in many small batches; asking the database for subscribers in each of them
would add a query to every one. The snapshot is loaded once every few seconds (see wagate.core.cache).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.core.cache import Caches, Part, TTLCache
from wagate.events.models import EventKind, Webhook

_ENABLED = select(Webhook.id, Webhook.account_id, Webhook.events).where(Webhook.enabled.is_(True))


@dataclass(frozen=True)
class Subscriptions:
    # account id -> event kind -> webhook ids
    by_account: dict[int, dict[str, list[int]]]

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[int, int, list[str]]]) -> Subscriptions:
        by_account: dict[int, dict[str, list[int]]] = {}
        for webhook_id, account_id, events in rows:
            kinds = by_account.setdefault(account_id, {})
            for kind in events:
                kinds.setdefault(kind, []).append(webhook_id)
        return cls(by_account)

    def webhooks(self, account_id: int, kind: EventKind) -> list[int]:
        return self.by_account.get(account_id, {}).get(kind.value, [])

    def for_kind(self, kind: EventKind) -> dict[int, list[int]]:
        """account id -> the webhooks that take `kind`."""
        found = {account: kinds.get(kind.value, []) for account, kinds in self.by_account.items()}
        return {account: ids for account, ids in found.items() if ids}


NO_SUBSCRIPTIONS = Subscriptions({})


async def load_subscriptions(session: AsyncSession) -> Subscriptions:
    return Subscriptions.from_rows(await session.execute(_ENABLED))


# One snapshot for the whole process (the key is None).
SUBSCRIPTIONS: Part[TTLCache[None, Subscriptions]] = Part("subscriptions", TTLCache)


async def current_subscriptions(caches: Caches) -> Subscriptions:
    """Every enabled webhook by account and event kind (one small query every few seconds)."""

    async def load() -> Subscriptions:
        async with caches.db.read() as session:
            return await load_subscriptions(session)

    return await caches[SUBSCRIPTIONS].get_or_load(None, load)


def forget_subscriptions(caches: Caches) -> None:
    """After a webhook changed in this process: its sends and dispatcher see it at once."""
    caches[SUBSCRIPTIONS].clear()


def read_subscriptions(session: Session, account_ids: Iterable[int]) -> Subscriptions:
    """Straight from the database, for some accounts (when no snapshot is at hand)."""
    return Subscriptions.from_rows(session.execute(_ENABLED.where(Webhook.account_id.in_(set(account_ids)))))
