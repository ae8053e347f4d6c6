"""Who is calling with an API key, answered from the process's cache (see wagate.core.cache).

A send needs the caller on every request; a key does not change from one request to the next, so the hot
path reads it from memory, and notes the key's last use beside the request.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from wagate.accounts.auth import LAST_USE_PRECISION, Principal, load_principal, record_use
from wagate.core.cache import Caches, Part, TTLCache
from wagate.core.db import utcnow
from wagate.core.errors import Unauthorized
from wagate.core.security import hash_api_token

log = logging.getLogger(__name__)

# By the token's hash. An unknown (or revoked) token is remembered as None just as briefly: a client
# repeating a wrong key costs one query per TTL, not one per request, and a key created meanwhile
# (provisioning runs in another process) works within the same seconds as a revoked one stops. The
# cache is bounded, so random tokens cannot grow it.
PRINCIPALS: Part[TTLCache[str, Principal | None]] = Part("principals", TTLCache)


class KeyUses:
    """The last use of each key this process wrote, and the writes still running."""

    def __init__(self) -> None:
        self.noted: dict[int, datetime] = {}
        self.writes: set[asyncio.Task[None]] = set()


KEY_USES: Part[KeyUses] = Part("API key uses", KeyUses)


async def principal_for_token(caches: Caches, token: str) -> Principal:
    """The caller of a bearer token, or 401 for a token that is unknown or revoked."""
    token_hash = hash_api_token(token)

    async def load() -> Principal | None:
        async with caches.db.read() as session:
            loaded = await load_principal(session, token_hash)
        if loaded is not None and loaded.api_key_id is not None:
            _note_use(caches, loaded.api_key_id)
        return loaded

    principal = await caches[PRINCIPALS].get_or_load(token_hash, load)
    if principal is None:
        raise Unauthorized("The API key is unknown or revoked.")
    return principal


def forget_principal(caches: Caches, token_hash: str) -> None:
    """After a key was issued or revoked in this process: it works, or stops, at once."""
    caches[PRINCIPALS].discard(token_hash)


def _note_use(caches: Caches, api_key_id: int) -> None:
    """Write the key's last use beside the request (a task of its own, never awaited by it), at most
    once a minute per key and process: the cache reloads a key every few seconds."""
    uses = caches[KEY_USES]
    now = utcnow()
    noted = uses.noted.get(api_key_id)
    if noted is not None and now - noted < LAST_USE_PRECISION:
        return
    uses.noted[api_key_id] = now
    if len(uses.noted) > 10_000:
        uses.noted.clear()

    async def write() -> None:
        try:
            await caches.db.write(lambda session: record_use(session, api_key_id=api_key_id, at=now))
        except Exception as exc:  # a key's last use is not worth a failed request or a crash
            log.warning("could not note the use of API key %s: %r", api_key_id, exc)

    task = asyncio.create_task(write())
    uses.writes.add(task)
    task.add_done_callback(uses.writes.discard)
