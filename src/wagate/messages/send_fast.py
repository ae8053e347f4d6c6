"""The send of one message over HTTP (`POST .../whatsapp/messages`): the fast path that serves it, and
the Idempotency-Key rules around the service's `accept_send`, which the documented route
(wagate.messages.endpoints.send_message) shares."""

from __future__ import annotations

import json
import re

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from wagate.accounts.access import authenticate, get_gateway
from wagate.accounts.auth import Principal
from wagate.core.errors import invalid_fields, invalid_json
from wagate.http.responses import FastJSONResponse as JSONResponse
from wagate.idempotency import service as idempotency
from wagate.idempotency.http import answer_once
from wagate.messages import service
from wagate.messages.schemas import SendMessageRequest, accepted_view
from wagate.runtime.gateway import Gateway


async def accept_once(
    gateway: Gateway, principal: Principal, body: SendMessageRequest, path: str, idempotency_key: str | None
) -> JSONResponse:
    async def accept(idem: idempotency.IdempotentRequest | None) -> JSONResponse:
        accepted = await service.accept_send(gateway, principal=principal, request=body, idem=idem)
        return JSONResponse(accepted_view(accepted), status_code=201)

    return await answer_once(gateway, path, principal, body, idempotency_key, accept)


# `POST .../whatsapp/messages` without a query string: the send of an OTP, the hottest request there
# is. WagateApp hands it to `send_message_fast` below the request log and the guard, past FastAPI's
# dependency solving, body validation and routing, which cost about a sixth of a send's CPU
# (docs/performance.md, "Where the time goes now"). `endpoints.send_message` documents the
# route and serves the rest (a dry run).
SEND_PATH = re.compile(r"/v1/accounts/([0-9]{1,10})/whatsapp/messages")


async def send_message_fast(request: Request) -> Response:
    """`endpoints.send_message` in plain Starlette: the same checks in the same service functions (the
    key, the account, the body's model, the idempotency rules); errors are raised for WagateApp to
    answer."""
    # In FastAPI's order, so both routes answer alike: the body read and parsed, then the key and the
    # account, then the body's fields.
    raw = await request.body()
    try:
        # The standard library's parser, as FastAPI's: orjson reads an integer beyond 64 bits as a
        # float, which the body's limits must see to refuse (wagate.http.limits).
        data = json.loads(raw) if raw else None
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, a number of 4300+ digits
        raise invalid_json(exc) from None
    gateway = get_gateway(request)
    principal = await authenticate(request, gateway)
    principal.require_account(int(request.path_params["account_id"]))
    if data is None:
        raise invalid_fields([{"type": "missing", "loc": ("body",), "msg": "Field required"}])
    try:
        body = SendMessageRequest.model_validate(data, from_attributes=True)  # as FastAPI validates
    except ValidationError as exc:
        raise invalid_fields(exc.errors()) from None
    key = request.headers.get("idempotency-key")
    return await accept_once(gateway, principal, body, request.url.path, key)
