"""The Idempotency-Key rules of API.md for an accepting endpoint (POST messages, POST bulk_messages)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError

from wagate.accounts.auth import Principal
from wagate.core.errors import WagateError
from wagate.http.responses import FastJSONResponse as JSONResponse
from wagate.idempotency import service as idempotency
from wagate.runtime.gateway import Gateway

Accept = Callable[[idempotency.IdempotentRequest | None], Awaitable[JSONResponse]]


async def answer_once(
    gateway: Gateway,
    path: str,
    principal: Principal,
    body: BaseModel,
    key: str | None,
    accept: Accept,
) -> JSONResponse:
    """`accept(idem)` the request, unless its key was answered already (the same answer again) or is
    being answered right now (409). `accept`'s unit looks for the key first (`answered_before`: then
    it stores nothing and `AlreadyAnswered` comes out) and stores its response with the key last."""
    if key is None or principal.api_key_id is None:  # keys are per API key; the dashboard has none
        return await accept(None)
    idem = idempotency.IdempotentRequest(
        api_key_id=principal.api_key_id,
        key=idempotency.validate_key(key),
        request_hash=idempotency.request_hash(path, body.model_dump(mode="json")),
    )
    async with gateway.caches[idempotency.IN_FLIGHT].hold(idem):
        try:
            return await accept(idem)
        except idempotency.AlreadyAnswered as repeat:  # found in the accepting unit, which stored nothing
            first = repeat.replay(idem)
            return JSONResponse(first.body, status_code=first.status_code)
        except (WagateError, IntegrityError):
            # WagateError: refused now (its template removed since, say), yet a repeat gets its first
            # answer, and another body under a used key 422: the key comes before the checks.
            # IntegrityError: another process committed the same key after our unit looked for it;
            # the key's primary key refused ours, so nothing of this request was stored (see
            # `remember_accepted`), and this is a repeat of that request.
            async with gateway.db.read() as session:
                stored = await idempotency.find_response(session, idem)
            if stored is None:
                raise
            return JSONResponse(stored.body, status_code=stored.status_code)
