"""The runtime value every service takes: the database, settings, secret box, Cloud API client, the
caches of the process, the dispatcher and the live changes. Built once per process by
wagate.api.process.GatewayProcess (for `serve` and `worker` alike); a request handler gets it with
wagate.accounts.access.GatewayDep.

The dispatcher is seen through `Dispatch`, the small interface the services need of it (wake-ups,
whether this process sends for a channel), so the domains do not depend on the dispatcher's package,
which depends on them. The fast path of a single send goes through `rooms`, below the domains
(wagate.outbox.fast_claims): the lanes register there, and a send calls nothing above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wagate.core.cache import Caches
from wagate.core.config import Settings
from wagate.core.db import Database
from wagate.core.live_hub import LiveHub
from wagate.core.security import SecretBox
from wagate.http.limits import KeyRateLimiter
from wagate.outbox.fast_claims import SendRooms
from wagate.whatsapp.client import CloudApiClient


class Dispatch(Protocol):
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
    # What the process remembers between requests (API keys, inbox access, templates, subscriptions,
    # idempotency keys in flight), each part declared by its domain.
    caches: Caches
    dispatcher: Dispatch
    # The dispatcher's lanes as the fast path of a single send sees them: room for it, and its start.
    rooms: SendRooms
    # The live changes of committed writes, for the dashboard's pages (`live.subscribe(account_id)`).
    live: LiveHub
    # Requests per API key and second (429 `rate_limited` beyond).
    key_rates: KeyRateLimiter
