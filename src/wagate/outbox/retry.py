"""Retry policies as values: how often and how long a kind of job is tried again. Nothing sleeps."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    base_delay: float
    factor: float = 2.0
    cap: float = 300.0
    jitter: float = 0.2  # +- this share of the delay, so retries of many rows spread out

    def delay(self, attempt: int) -> float:
        """Seconds before attempt number `attempt + 1`, `attempt` counting from 1."""
        raw = min(self.cap, self.base_delay * self.factor ** max(0, attempt - 1))
        return max(0.0, raw * (1 + random.uniform(-self.jitter, self.jitter)))

    def exhausted(self, attempt: int) -> bool:
        return attempt >= self.max_attempts


# A send that certainly did not reach Meta (refused connection, 130429): tried again for about an hour.
SEND_NOT_DELIVERED = RetryPolicy(max_attempts=20, base_delay=0.5, cap=300.0)
# A channel that Meta throttles (130429, 131056) pauses all its sends for this long.
CHANNEL_THROTTLED = RetryPolicy(max_attempts=1_000_000, base_delay=1.0, cap=60.0, jitter=0.1)
# A send orphaned by a crash mid-call is sent again at most this often, and only after its grace
# period passed without any status webhook for it.
SEND_ORPHANED = RetryPolicy(max_attempts=3, base_delay=0.0)
# An event delivery: first retry within 10 s of the failure, second within 60 s, then growing to
# every 3 hours; it goes on until the delivery is `EVENT_RETRY_WINDOW` old (API.md section 8).
EVENT_DELIVERY = RetryPolicy(max_attempts=1_000_000, base_delay=5.0, factor=6.0, cap=3 * 3600.0)
EVENT_RETRY_WINDOW = 24 * 3600.0
# Background jobs (Meta webhook processing, template sync, purges).
BACKGROUND = RetryPolicy(max_attempts=50, base_delay=1.0, cap=600.0)
