"""What every API request looks up, answered from short-lived caches (see wagate.core.cache).

A send needs the caller (API key), its right to the channel (account and inbox membership) and the
template; none of them changes from one request to the next, so the hot path reads them from memory.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from sqlalchemy import select

from wagate.accounts.auth import LAST_USE_PRECISION, Principal, load_principal, record_use
from wagate.channels.models import Channel
from wagate.channels.service import channel_for_member
from wagate.core.cache import TTLCache
from wagate.core.db import Database, utcnow
from wagate.core.errors import Unauthorized
from wagate.core.security import hash_api_token
from wagate.events.subscriptions import Subscriptions, load_subscriptions
from wagate.templates.models import Template
from wagate.templates.repository import find_template

log = logging.getLogger(__name__)


class Lookups:
    def __init__(self, db: Database) -> None:
        self.db = db
        # By the token's hash. An unknown (or revoked) token is remembered as None just as briefly: a
        # client repeating a wrong key costs one query per TTL, not one per request, and a key created
        # meanwhile (provisioning runs in another process) works within the same seconds as a revoked
        # one stops. The cache is bounded, so random tokens cannot grow it.
        self.principals: TTLCache[str, Principal | None] = TTLCache()
        self.channels: TTLCache[tuple[int, int, int], Channel] = TTLCache()
        self.templates: TTLCache[tuple[int, str, str], Template | None] = TTLCache()
        self.numbers: TTLCache[str, int | None] = TTLCache()  # phone_number_id: channel id
        self._subscriptions: TTLCache[None, Subscriptions] = TTLCache()
        # Hosts of status_callback URLs found to be public (the SSRF guard), for a minute.
        self.public_hosts: TTLCache[str, bool] = TTLCache(ttl=60.0)
        self._uses_noted: dict[int, datetime] = {}
        self._writes: set[asyncio.Task[None]] = set()

    async def principal(self, token: str) -> Principal:
        token_hash = hash_api_token(token)

        async def load() -> Principal | None:
            async with self.db.read() as session:
                loaded = await load_principal(session, token_hash)
            if loaded is not None and loaded.api_key_id is not None:
                self._note_use(loaded.api_key_id)
            return loaded

        principal = await self.principals.get_or_load(token_hash, load)
        if principal is None:
            raise Unauthorized("The API key is unknown or revoked.")
        return principal

    def _note_use(self, api_key_id: int) -> None:
        """Write the key's last use beside the request (a task of its own, never awaited by it), at most
        once a minute per key and process: the cache reloads a key every few seconds."""
        now = utcnow()
        noted = self._uses_noted.get(api_key_id)
        if noted is not None and now - noted < LAST_USE_PRECISION:
            return
        self._uses_noted[api_key_id] = now
        if len(self._uses_noted) > 10_000:
            self._uses_noted.clear()

        async def write() -> None:
            try:
                await self.db.write(lambda session: record_use(session, api_key_id=api_key_id, at=now))
            except Exception as exc:  # a key's last use is not worth a failed request or a crash
                log.warning("could not note the use of API key %s: %r", api_key_id, exc)

        task = asyncio.create_task(write())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def channel(self, principal: Principal, channel_id: int) -> Channel:
        """The channel, if the caller may use it (404 / 403 otherwise, never cached)."""

        async def load() -> Channel:
            async with self.db.read() as session:
                return await channel_for_member(session, principal=principal, channel_id=channel_id)

        return await self.channels.get_or_load((principal.user_id, principal.account_id, channel_id), load)

    async def template(self, channel_id: int, name: str, language: str) -> Template | None:
        async def load() -> Template | None:
            async with self.db.read() as session:
                return await find_template(session, channel_id=channel_id, name=name, language=language)

        return await self.templates.get_or_load((channel_id, name, language), load)

    async def channel_by_phone_number_id(self, phone_number_id: str) -> int | None:
        """The id of the channel with this business phone number id, None if there is none (Meta's
        webhooks name the number, several times for every message sent)."""

        async def load() -> int | None:
            async with self.db.read() as session:
                found: int | None = await session.scalar(
                    select(Channel.id).where(Channel.phone_number_id == phone_number_id)
                )
            return found

        return await self.numbers.get_or_load(phone_number_id, load)

    async def subscriptions(self) -> Subscriptions:
        """Every enabled webhook by account and event kind (one small query every few seconds)."""

        async def load() -> Subscriptions:
            async with self.db.read() as session:
                return await load_subscriptions(session)

        return await self._subscriptions.get_or_load(None, load)

    def forget_principal(self, token_hash: str) -> None:
        """After a key was issued or revoked in this process: it works, or stops, at once."""
        self.principals.discard(token_hash)

    def forget_subscriptions(self) -> None:
        """After a webhook changed in this process: its sends and dispatcher see it at once."""
        self._subscriptions.clear()

    def forget_templates(self) -> None:
        """After a sync in this process: its result applies at once."""
        self.templates.clear()
