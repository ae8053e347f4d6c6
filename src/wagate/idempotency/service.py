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
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.db import utcnow
from wagate.errors import IdempotencyKeyInUse, IdempotencyKeyReused, InvalidRequest
from wagate.idempotency.models import IdempotencyKey

MAX_KEY_LENGTH = 255


@dataclass(frozen=True)
class StoredResponse:
    status_code: int
    body: dict[str, Any]


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
    if row.request_hash != request.request_hash:
        raise IdempotencyKeyReused()
    return StoredResponse(row.response_status, row.response_body)


def remember_response(
    session: Session, request: IdempotentRequest, response: StoredResponse, *, ttl_seconds: int
) -> None:
    """Store the response with the key, in the unit that stores what the request did.

    A live row for the key is another request's: it was committed after our `find_response` (by
    another process, since this one holds the key meanwhile). It stays, the insert hits the primary
    key, and the whole unit fails with IntegrityError, so nothing of this request is stored;
    `answer_once` then answers with that row as a repeat.
    """
    now = utcnow()
    # An expired row for the key may still be there until the purge runs: only that one goes.
    session.execute(
        delete(IdempotencyKey).where(
            IdempotencyKey.api_key_id == request.api_key_id,
            IdempotencyKey.key == request.key,
            IdempotencyKey.expires_at <= now,
        )
    )
    session.add(
        IdempotencyKey(
            api_key_id=request.api_key_id,
            key=request.key,
            request_hash=request.request_hash,
            response_status=response.status_code,
            response_body=response.body,
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_seconds),
        )
    )
    session.flush()


def remember_accepted(
    session: Session,
    request: IdempotentRequest | None,
    status_code: int,
    body: dict[str, Any],
    *,
    ttl_seconds: int,
) -> None:
    """In the transaction that accepts a request: remember its response under its key, if it has one."""
    if request is not None:
        remember_response(session, request, StoredResponse(status_code, body), ttl_seconds=ttl_seconds)


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
