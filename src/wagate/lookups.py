"""What every API request looks up, answered from short-lived caches (see wagate.cache).

A send needs the caller (API key), its right to the channel (account and inbox membership) and the
template; none of them changes from one request to the next, so the hot path reads them from memory.
"""

from __future__ import annotations

from sqlalchemy import select

from wagate.accounts.auth import Principal, load_principal
from wagate.cache import TTLCache
from wagate.channels.models import Channel
from wagate.channels.service import channel_for_member
from wagate.db import Database
from wagate.errors import Unauthorized
from wagate.events.models import Webhook
from wagate.security import hash_api_token
from wagate.templates.models import Template


class Lookups:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.principals: TTLCache[str, Principal] = TTLCache()
        self.channels: TTLCache[tuple[int, int, int], Channel] = TTLCache()
        self.templates: TTLCache[tuple[int, str, str], Template | None] = TTLCache()
        self.subscriptions: TTLCache[int, dict[str, list[int]]] = TTLCache()
        # Hosts of status_callback URLs found to be public (the SSRF guard), for a minute.
        self.public_hosts: TTLCache[str, bool] = TTLCache(ttl=60.0)

    async def principal(self, token: str) -> Principal:
        token_hash = hash_api_token(token)

        async def load() -> Principal:
            async with self.db.read() as session:
                principal = await load_principal(session, token_hash)
            if principal is None:
                raise Unauthorized("The API key is unknown or revoked.")
            return principal

        return await self.principals.get_or_load(token_hash, load)

    async def channel(self, principal: Principal, channel_id: int) -> Channel:
        """The channel, if the caller may use it (404 / 403 otherwise, never cached)."""

        async def load() -> Channel:
            async with self.db.read() as session:
                return await channel_for_member(session, principal=principal, channel_id=channel_id)

        return await self.channels.get_or_load((principal.user_id, principal.account_id, channel_id), load)

    async def template(self, channel_id: int, name: str, language: str) -> Template | None:
        async def load() -> Template | None:
            async with self.db.read() as session:
                found: Template | None = await session.scalar(
                    select(Template).where(
                        Template.channel_id == channel_id,
                        Template.name == name,
                        Template.language == language,
                    )
                )
                return found

        return await self.templates.get_or_load((channel_id, name, language), load)

    async def subscribers(self, account_id: int) -> dict[str, list[int]]:
        """The account's enabled webhooks by event kind, so a send knows without a query whom to tell."""

        async def load() -> dict[str, list[int]]:
            async with self.db.read() as session:
                rows = await session.execute(
                    select(Webhook.id, Webhook.events).where(
                        Webhook.account_id == account_id, Webhook.enabled.is_(True)
                    )
                )
            found: dict[str, list[int]] = {}
            for webhook_id, events in rows:
                for kind in events:
                    found.setdefault(kind, []).append(webhook_id)
            return found

        return await self.subscriptions.get_or_load(account_id, load)

    def forget_templates(self) -> None:
        """After a sync in this process: its result applies at once."""
        self.templates.clear()
