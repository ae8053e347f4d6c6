"""What a request handler depends on, injected with FastAPI's `Depends`: the `Gateway` value, and the
caller (`Authenticated`), a member of the account in the path (`Member`), or its administrator."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from wagate.accounts.auth import Principal
from wagate.accounts.callers import principal_for_token
from wagate.core.errors import Unauthorized
from wagate.runtime.gateway import Gateway


def get_gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


async def _gateway_dependency(request: Request) -> Gateway:
    # A coroutine on purpose: FastAPI runs a plain function dependency in its thread pool, a
    # hand-off to another thread and back on every request (docs/performance.md).
    return get_gateway(request)


GatewayDep = Annotated[Gateway, Depends(_gateway_dependency)]


async def authenticate(request: Request, gateway: GatewayDep) -> Principal:
    """The caller's principal from `Authorization: Bearer <key>`, or 401 (429 past the key's rate)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized()
    principal = await principal_for_token(gateway.caches, token.strip())
    if principal.api_key_id is not None:
        gateway.key_rates.take(principal.api_key_id)
    return principal


Authenticated = Annotated[Principal, Depends(authenticate)]


async def account_member(account_id: int, principal: Authenticated) -> Principal:
    """For `/v1/accounts/{account_id}/...`: 401 without a key, 403 for another account."""
    principal.require_account(account_id)
    return principal


Member = Annotated[Principal, Depends(account_member)]


async def administrator(principal: Member) -> Principal:
    principal.require_administrator()
    return principal


Administrator = Annotated[Principal, Depends(administrator)]
