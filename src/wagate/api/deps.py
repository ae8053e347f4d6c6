"""What a request handler may use, as one typed value injected with `Depends`, not attributes of
`app.state`: the database, settings, secret box, Cloud API client, caches, the dispatcher and the
live changes.

The dispatcher is seen through `Dispatch`, the small interface the API needs of it (the fast path of a
single send, wake-ups), so the domains do not depend on the dispatcher's package, which depends on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Protocol

from fastapi import Depends, Request

from wagate.accounts.auth import Principal
from wagate.core.config import Settings
from wagate.core.db import Database
from wagate.core.errors import Unauthorized
from wagate.core.live import LiveHub
from wagate.core.security import SecretBox
from wagate.http.limits import KeyRateLimiter
from wagate.idempotency.service import InFlightKeys
from wagate.outbox.models import FastClaim
from wagate.runtime.lookups import Lookups
from wagate.whatsapp.client import CloudApiClient


class Dispatch(Protocol):
    def prepare_claim(self, channel_id: int) -> FastClaim | None:
        """Room for a new single send in its lane right now, or None (store it ready and `wake`)."""

    def owns(self, channel_id: int) -> bool:
        """Whether this process sends for the channel (else other processes are woken by NOTIFY)."""

    def wake(self, channel_id: int | None = None) -> None:
        """Rows were stored for the channel (or for no channel: jobs): look at them now."""

    def wake_events(self) -> None:
        """Events were written: deliver them now."""

    @property
    def running(self) -> bool:
        """Whether its loop is alive (readiness)."""


@dataclass(frozen=True)
class Gateway:
    db: Database
    settings: Settings
    secret_box: SecretBox
    client: CloudApiClient
    lookups: Lookups
    dispatcher: Dispatch
    # Idempotency keys whose first request this process is still handling (a repeat meanwhile is 409).
    idempotency_in_flight: InFlightKeys
    # The live changes of committed writes, for the dashboard's pages (`live.subscribe(account_id)`).
    live: LiveHub
    # Requests per API key and second (429 `rate_limited` beyond).
    key_rates: KeyRateLimiter


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
    principal = await gateway.lookups.principal(token.strip())
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
