"""The Idempotency-Key rules of API.md for an accepting endpoint (POST messages, POST bulk_messages)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError

from wagate.accounts.auth import Principal
from wagate.db import Database
from wagate.idempotency import service as idempotency
from wagate.responses import FastJSONResponse as JSONResponse

Accept = Callable[[idempotency.IdempotentRequest | None], Awaitable[JSONResponse]]


async def answer_once(
    db: Database,
    in_flight: idempotency.InFlightKeys,
    path: str,
    principal: Principal,
    body: BaseModel,
    key: str | None,
    accept: Accept,
) -> JSONResponse:
    """`accept(idem)` the request, unless its key was answered already (the same answer again) or is
    being answered right now (409). `accept` stores its response with the key in its own transaction."""
    if key is None or principal.api_key_id is None:  # keys are per API key; the dashboard has none
        return await accept(None)
    idem = idempotency.IdempotentRequest(
        api_key_id=principal.api_key_id,
        key=idempotency.validate_key(key),
        request_hash=idempotency.request_hash(path, body.model_dump(mode="json")),
    )
    async with in_flight.hold(idem):
        async with db.read() as session:
            stored = await idempotency.find_response(session, idem)
        if stored is not None:
            return JSONResponse(stored.body, status_code=stored.status_code)
        try:
            return await accept(idem)
        except IntegrityError:
            # Another process committed the same key after our read: the key's primary key refused
            # ours, so nothing of this request was stored (see `remember_response`). This is a repeat
            # of that request: its response, or 422 if the bodies differ.
            async with db.read() as session:
                stored = await idempotency.find_response(session, idem)
            if stored is None:
                raise
            return JSONResponse(stored.body, status_code=stored.status_code)
