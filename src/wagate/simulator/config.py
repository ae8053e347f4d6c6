"""The simulator's settings: how it answers sends and posts status webhooks, and the channels it knows.

Set at start-up (`wagate simulator`, the sandbox, the tests) and changed at run time over
``/_sim/config``; `SimulatorState.reset` goes back to the start-up values but for the webhook URL.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class StatusDelays:
    """Seconds after acceptance at which each status webhook is sent."""

    sent: float = 0.05
    delivered: float = 0.1
    read: float = 0.2


@dataclass
class ChannelInfo:
    phone_number_id: str
    waba_id: str
    display_phone_number: str = "15550000000"


@dataclass
class SimulatorConfig:
    webhook_url: str | None = None
    app_secret: str = "simulator-app-secret"  # noqa: S105 - a fake Meta app, not a credential
    status_delays: StatusDelays = field(default_factory=StatusDelays)
    read_enabled: bool = False
    # More than N accepted sends for one phone_number_id within any 1 s window -> 130429.
    rate_limit_per_second: int | None = None
    # None accepts any non-empty bearer token.
    access_tokens: set[str] | None = None
    auto_statuses: bool = True
    reorder_statuses: bool = False
    # Each status webhook goes out this many times (True = twice, as Meta sometimes does; 10 for a storm).
    duplicate_statuses: bool | int = False
    slow_response_seconds: float = 30.0
    # Every accepted send is answered this long after it was recorded: Meta's own processing and the
    # way back, which the real Cloud API takes a few hundred milliseconds for.
    response_latency_seconds: float = 0.0
    # Meta retries undelivered webhooks for days; ten minutes is plenty for a restarted gateway.
    webhook_retry_total: float = 600.0
    webhook_retry_initial: float = 0.2
    webhook_retry_cap: float = 5.0
    webhook_timeout: float = 10.0
    # Statuses of one WABA due within this many seconds of the first go out in one POST; 0 = one each.
    webhook_batch_window_seconds: float = 0.03
    # The UTC day (YYYY-MM-DD) whose pricing rules the statuses follow; None: today by the real clock.
    pricing_date: str | None = None
    # Template pacing: marketing and utility template sends answered `held_for_quality_assessment`
    # (true: all; a fraction 0..1: that share, every n-th, so a run repeats), their statuses sent only
    # once released: after `held_release_seconds`, or by `POST /_sim/held/release` when that is None.
    hold_template_sends: bool | float = False
    held_release_seconds: float | None = 5.0
    channels: list[ChannelInfo] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("app_secret")
        data["access_tokens"] = sorted(self.access_tokens) if self.access_tokens is not None else None
        return data
