"""What the dispatcher's lanes need, as one small value: they never hold the whole dispatcher."""

from __future__ import annotations

from dataclasses import dataclass

from wagate.core.cache import Caches
from wagate.core.config import Settings
from wagate.core.db import Database
from wagate.core.security import SecretBox
from wagate.observability.metrics import Metrics
from wagate.whatsapp.client import CloudApiClient


@dataclass(frozen=True)
class LaneDeps:
    db: Database
    settings: Settings
    client: CloudApiClient
    secret_box: SecretBox
    caches: Caches
    worker_id: str  # stamped on the rows this process claims (`locked_by`)
    metrics: Metrics

    @property
    def lease_seconds(self) -> float:
        """How long a claimed send stays `in_flight`: the call's timeout, then the grace for a webhook."""
        return self.settings.upstream_timeout_seconds + self.settings.unconfirmed_send_grace_seconds
