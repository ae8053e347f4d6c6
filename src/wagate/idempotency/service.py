"""`Idempotency-Key`: a repeat of a successful request returns the first response and does nothing.

Scoped to the API key and kept 24 hours. Only accepted requests are remembered, so a request that
failed validation may be retried with the same key once it is fixed.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import orjson
from sqlalchemy import bindparam, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.core.cache import Part
from wagate.core.db import utcnow
from wagate.core.errors import IdempotencyKeyInUse, IdempotencyKeyReused, InvalidRequest
from wagate.core.tables import table_of
from wagate.idempotency.models import IdempotencyKey

MAX_KEY_LENGTH = 255


@dataclass(frozen=True)
class StoredResponse:
    status_code: int
    body: dict[str, Any]


class AlreadyAnswered(Exception):
    """The key was answered before: the unit that would have accepted the request stored nothing, and
    this is the first answer (`answer_once` replays it, or refuses a different body with 422)."""

    def __init__(self, stored: StoredResponse, request_hash: str) -> None:
        super().__init__("the Idempotency-Key was answered before")
        self.stored = stored
        self.request_hash = request_hash

    def replay(self, request: IdempotentRequest) -> StoredResponse:
        """The first answer, for a repeat of its request; 422 for another body under the same key."""
        if self.request_hash != request.request_hash:
            raise IdempotencyKeyReused()
        return self.stored


# Built once, values bound at execution: a careful client sends a key with every send.
_KEYS = table_of(IdempotencyKey)
_THE_KEY = (_KEYS.c.api_key_id == bindparam("api_key_id")) & (_KEYS.c.key == bindparam("key"))
_FIND_KEY = select(
    _KEYS.c.request_hash, _KEYS.c.response_status, _KEYS.c.response_body, _KEYS.c.expires_at
).where(_THE_KEY)
_DROP_KEY = delete(_KEYS).where(_THE_KEY)
_STORE_KEY = insert(_KEYS)


@dataclass(frozen=True)
class IdempotentRequest:
    api_key_id: int
    key: str
    request_hash: str


def request_hash(path: str, body: Any) -> str:
    canonical = orjson.dumps({"path": path, "body": body}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


def validate_key(key: str) -> str:
    if not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise InvalidRequest(
            "Idempotency-Key must be 1 to 255 characters.",
            details=[{"field": "Idempotency-Key", "issue": "must be 1 to 255 characters"}],
        )
    return key


async def find_response(session: AsyncSession, request: IdempotentRequest) -> StoredResponse | None:
    """The remembered response for this key, None when there is none, 422 when the body differs."""
    row = await session.scalar(
        select(IdempotencyKey).where(
            IdempotencyKey.api_key_id == request.api_key_id,
            IdempotencyKey.key == request.key,
            IdempotencyKey.expires_at > utcnow(),
        )
    )
    if row is None:
        return None
    return AlreadyAnswered(StoredResponse(row.response_status, row.response_body), row.request_hash).replay(
        request
    )


def answered_before(session: Session, request: IdempotentRequest | None) -> AlreadyAnswered | None:
    """First thing in the unit that accepts a request with a key: the key's first answer when it has
    one (the unit then stores nothing and returns it), else None, and an expired row for the key goes.

    Asked in the accepting transaction rather than in a read of its own before it: that read cost
    more than the rest of a send (a session, a connection and, on SQLite, thread hand-offs;
    docs/performance.md, "Idempotency keys")."""
    if request is None:
        return None
    where = {"api_key_id": request.api_key_id, "key": request.key}
    row = session.execute(_FIND_KEY, where).first()
    if row is None:
        return None
    if row.expires_at > utcnow():
        return AlreadyAnswered(StoredResponse(row.response_status, row.response_body), row.request_hash)
    session.execute(_DROP_KEY, where)  # expired, not purged yet
    return None


def remember_accepted(
    session: Session,
    request: IdempotentRequest | None,
    status_code: int,
    body: dict[str, Any],
    *,
    ttl_seconds: int,
) -> None:
    """Last thing in the unit that accepts a request: remember its response under its key, if it has
    one (`answered_before` came first in the same unit).

    A row for the key now is another process's request, committed after our `answered_before` (this
    process holds the key meanwhile): the insert hits the primary key and the whole unit fails with
    IntegrityError, so nothing of this request is stored; `answer_once` then replays that row."""
    if request is None:
        return
    now = utcnow()
    session.execute(
        _STORE_KEY,
        {
            "api_key_id": request.api_key_id,
            "key": request.key,
            "request_hash": request.request_hash,
            "response_status": status_code,
            "response_body": body,
            "created_at": now,
            "expires_at": now + timedelta(seconds=ttl_seconds),
        },
    )


def purge_expired(session: Session) -> int:
    result = session.execute(delete(IdempotencyKey).where(IdempotencyKey.expires_at <= utcnow()))
    return int(getattr(result, "rowcount", 0) or 0)


@dataclass
class InFlightKeys:
    """Keys whose first request is being processed in this process: a repeat meanwhile is a 409."""

    keys: set[tuple[int, str]] = field(default_factory=set)

    @asynccontextmanager
    async def hold(self, request: IdempotentRequest) -> AsyncIterator[None]:
        slot = (request.api_key_id, request.key)
        if slot in self.keys:
            raise IdempotencyKeyInUse()
        self.keys.add(slot)
        try:
            yield
        finally:
            self.keys.discard(slot)


# What this process is handling: one set per process, like a cache.
IN_FLIGHT: Part[InFlightKeys] = Part("idempotency keys in flight", InFlightKeys)
