"""The simulator's settings and in-memory state.

All of it lives on the simulator's own event loop and is touched only from there (request handlers
and webhook tasks), so it needs no locks. Tests and the sandbox reach it over the ``/_sim/`` HTTP
endpoints.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import math
import time
import uuid
from collections import deque
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import orjson

from wagate.simulator.customers import CustomerBook
from wagate.simulator.templates import seed_for

if TYPE_CHECKING:
    from wagate.simulator.payloads import StatusUpdate

RATE_WINDOW_SECONDS = 1.0
# Meta's announcement of 2026-07-01: from this UTC day a session (free-form) message is charged at the
# utility rate, and a utility template inside the customer's window is charged too (docs/simulator.md).
SESSIONS_CHARGED_FROM = date(2026, 10, 1)
# Template pacing holds marketing and utility templates only (Meta, "Template pacing").
PACED_CATEGORIES = ("MARKETING", "UTILITY")
# How many of the statuses handed out `/_sim/webhook_burst` can post again.
STATUSES_KEPT = 100_000


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


@dataclass(frozen=True, slots=True)
class SentRecord:
    """One accepted send request, as the simulator saw it."""

    received_at: float  # wall clock, Unix seconds
    received_monotonic: float
    phone_number_id: str
    waba_id: str
    to: str | None  # the number as sent in "to", or the customer's number for a send by user id
    recipient: str | None  # the BSUID sent in "recipient" (None for a send to a number)
    user_id: str  # the customer's business-scoped user id
    type: str
    # The request's JSON as it came, parsed only when read (`to_json`): a parsed body is a tree of
    # dozens of objects that the collector's full passes walk, and the simulator keeps every send of
    # a run (100,000 objects after a few thousand sends, passes of about 90 ms that held up the
    # receipt stamps the tests measure by); bytes are not walked.
    body_json: bytes
    biz_opaque_callback_data: str | None
    wamid: str
    template_name: str | None
    template_language: str | None
    template_category: str | None
    # The connection fault the answer to this accepted send met (``reset_after``, ``hang_after``...):
    # the client never learnt that it was accepted. None when answered as usual.
    answer_fault: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__slots__ if name != "body_json"}
        data["body"] = orjson.loads(self.body_json)
        data["received_at_iso"] = (
            datetime.fromtimestamp(self.received_at, UTC).isoformat().replace("+00:00", "Z")
        )
        return data


@dataclass
class InjectedFailure:
    """``fail_next``: the next ``count`` matching sends fail with ``code``.

    ``to`` / ``phone_number_id`` narrow it to one recipient or number, so a send of another test
    still in flight cannot use the failure up.
    """

    count: int
    code: int
    to: str | None = None  # digits, no '+', or a user id
    phone_number_id: str | None = None

    def matches(self, phone_number_id: str, recipients: tuple[str, ...]) -> bool:
        return (self.to is None or self.to in recipients) and (
            self.phone_number_id is None or self.phone_number_id == phone_number_id
        )


class ConnectionFault(StrEnum):
    """``fault_next`` kinds: the connection itself fails, as networks and Meta's front ends do.

    ``*_before``: the send is never recorded (it did not reach Meta: no log entry, no status webhook).
    ``*_after``: it is recorded and its status webhooks follow; only the answer is lost.
    """

    RESET_BEFORE = "reset_before"  # RST (SO_LINGER 0) instead of an answer; nothing recorded
    RESET_AFTER = "reset_after"  # recorded, then RST instead of the answer
    CLOSE_BEFORE = "close_before"  # an orderly close (FIN) without an answer; nothing recorded
    CLOSE_AFTER = "close_after"  # recorded, then FIN without the answer
    HANG_BEFORE = "hang_before"  # no answer until the client gives up (then closed); nothing recorded
    HANG_AFTER = "hang_after"  # recorded, the answer only after slow_response_seconds (fail_next 408)

    @property
    def reaches_meta(self) -> bool:
        return self.value.endswith("_after")


@dataclass
class InjectedFault:
    """``fault_next``: the next ``count`` matching sends meet the connection fault ``kind``."""

    count: int
    kind: ConnectionFault
    to: str | None = None  # digits, no '+', or a user id
    phone_number_id: str | None = None

    def matches(self, phone_number_id: str, recipients: tuple[str, ...]) -> bool:
        return (self.to is None or self.to in recipients) and (
            self.phone_number_id is None or self.phone_number_id == phone_number_id
        )


@dataclass
class WebhookCounters:
    delivered: int = 0
    failed_attempts: int = 0
    gave_up: int = 0


@dataclass
class HeldSend:
    """A template send Meta holds for a quality check: its statuses wait for `release`."""

    wamid: str
    phone_number_id: str
    keys: tuple[str, ...]  # the digits of "to" and/or the "recipient" user id
    release: asyncio.Future[None]


class SimulatorState:
    def __init__(self, config: SimulatorConfig) -> None:
        self._initial = copy.deepcopy(config)
        self.config = copy.deepcopy(config)
        self.channels: dict[str, ChannelInfo] = {c.phone_number_id: c for c in config.channels}
        self.templates: dict[str, list[dict[str, Any]]] = {}
        self.log: list[SentRecord] = []
        self.by_wamid: dict[str, SentRecord] = {}
        self._recent: dict[str, deque[float]] = {}
        self.fail_next: InjectedFailure | None = None
        # ``fault_next`` entries, oldest first; a send takes the first that matches it.
        self.faults: list[InjectedFault] = []
        # Every status the walks of accepted sends handed out (once, whatever the duplicates), for
        # ``/_sim/webhook_burst``.
        # The last STATUSES_KEPT only: a long sandbox run must not grow without end.
        self.statuses_sent: deque[StatusUpdate] = deque(maxlen=STATUSES_KEPT)
        # ``answer_wamid_next``: recipient digits (or user id) -> the wamid its next send is answered with.
        self.wamid_next: dict[str, str] = {}
        self.counters = WebhookCounters()
        # Sends answered with a Meta error, by its code (130429 for the rate limit, 131000 for a 5xx).
        self.refusals: dict[int, int] = {}
        self.customers = CustomerBook()
        # (phone number id, customer user id) -> Unix time of the customer's last message: their
        # 24-hour window, in which Meta does not charge utility templates.
        self.last_inbound: dict[tuple[str, str], float] = {}
        # (phone number id, customer user id) of the conversations Meta's AI agent holds: their
        # traffic goes on the `standby` field (control_routing.py).
        self.agent_holds: set[tuple[str, str]] = set()
        # Held template sends whose statuses wait, oldest first, and how many paced sends were seen
        # (which of them a fraction holds).
        self.held: list[HeldSend] = []
        self.paced_seen = 0

    def reset(self) -> None:
        """Back to the startup behaviour; the webhook URL and registered channels are wiring and stay."""
        webhook_url = self.config.webhook_url
        self.config = copy.deepcopy(self._initial)
        self.config.webhook_url = webhook_url
        self.templates.clear()
        self.log.clear()
        self.by_wamid.clear()
        self._recent.clear()
        self.fail_next = None
        self.faults.clear()
        self.statuses_sent.clear()
        self.wamid_next.clear()
        self.counters = WebhookCounters()
        self.refusals.clear()
        self.customers.clear()  # usernames go; the numbers keep their derived user ids
        self.last_inbound.clear()
        self.agent_holds.clear()
        self.held.clear()  # their status walks are cancelled with the other pending webhooks
        self.paced_seen = 0

    def window_open(self, phone_number_id: str, user_id: str, now: float) -> bool:
        last = self.last_inbound.get((phone_number_id, user_id))
        return last is not None and now - last < 24 * 3600

    def pricing_day(self, now: float) -> date:
        """The day whose pricing rules apply: `pricing_date` when set, else the UTC day of `now`."""
        if self.config.pricing_date is not None:
            return date.fromisoformat(self.config.pricing_date)
        return datetime.fromtimestamp(now, UTC).date()

    def billable(self, category: str, window_open: bool, now: float) -> bool:
        """Whether Meta charges a message of this pricing category (``service`` for free-form text)
        sent at `now`: from 2026-10-01 everything is; before, a service message and a utility template
        inside the customer's window were free (per-message pricing since July 2025)."""
        if self.pricing_day(now) >= SESSIONS_CHARGED_FROM:
            return True
        return category != "service" and not (category == "utility" and window_open)

    def take_hold(self, category: str | None) -> bool:
        """Whether this template send is held for a quality check (`hold_template_sends`)."""
        share = self.config.hold_template_sends
        if category is None or category.upper() not in PACED_CATEGORIES or share is False or share <= 0:
            return False
        seen, self.paced_seen = self.paced_seen, self.paced_seen + 1
        if share is True or share >= 1:
            return True
        # Every n-th of them, evenly: the count of held sends steps up by one at each hold.
        return math.floor((seen + 1) * share) > math.floor(seen * share)

    def release_held(
        self, *, phone_number_id: str | None = None, to: str | None = None, wamid: str | None = None
    ) -> int:
        """Let the statuses of the held sends that match go; returns how many."""
        released = [
            held
            for held in self.held
            if (phone_number_id is None or held.phone_number_id == phone_number_id)
            and (to is None or to in held.keys)
            and (wamid is None or held.wamid == wamid)
        ]
        for held in released:
            self.let_go(held)
        return len(released)

    def let_go(self, held: HeldSend) -> None:
        """Release one held send (by hand, or when `held_release_seconds` have passed)."""
        if not held.release.done():
            held.release.set_result(None)
        if held in self.held:
            self.held.remove(held)

    def channel(self, phone_number_id: str) -> ChannelInfo:
        """The registered channel, or one made up on the fly (its WABA id is the phone number id)."""
        info = self.channels.get(phone_number_id)
        if info is None:
            info = ChannelInfo(phone_number_id=phone_number_id, waba_id=phone_number_id)
            self.channels[phone_number_id] = info
        return info

    def templates_for(self, waba_id: str) -> list[dict[str, Any]]:
        templates = self.templates.get(waba_id)
        if templates is None:
            templates = self.templates[waba_id] = seed_for(waba_id)
        return templates

    def take_injected_failure(self, phone_number_id: str, recipients: tuple[str, ...]) -> int | None:
        """``recipients``: the digits of ``to`` and/or the ``recipient`` user id of the send."""
        failure = self.fail_next
        if failure is None or failure.count <= 0 or not failure.matches(phone_number_id, recipients):
            return None
        failure.count -= 1
        return failure.code

    def take_fault(self, phone_number_id: str, recipients: tuple[str, ...]) -> ConnectionFault | None:
        """The connection fault the first matching ``fault_next`` entry gives this send, if any."""
        for index, fault in enumerate(self.faults):
            if fault.matches(phone_number_id, recipients):
                fault.count -= 1
                if fault.count <= 0:
                    del self.faults[index]
                return fault.kind
        return None

    def status_copies(self) -> int:
        """How many times each status webhook goes out (``duplicate_statuses``)."""
        copies = self.config.duplicate_statuses
        if copies is True:
            return 2
        if copies is False:
            return 1
        return max(1, int(copies))

    def over_rate_limit(self, phone_number_id: str, now: float) -> bool:
        limit = self.config.rate_limit_per_second
        if limit is None:
            return False
        recent = self._recent.setdefault(phone_number_id, deque())
        while recent and now - recent[0] >= RATE_WINDOW_SECONDS:
            recent.popleft()
        return len(recent) >= limit

    def record(self, entry: SentRecord) -> None:
        self.log.append(entry)
        if entry.type != "template":
            # Meta: an app that sends a service message while on standby takes the conversation over.
            self.agent_holds.discard((entry.phone_number_id, entry.user_id))
        self.by_wamid[entry.wamid] = entry
        recent = self._recent.setdefault(entry.phone_number_id, deque())
        recent.append(entry.received_monotonic)
        # Only the last second matters for the limit; keep the deque short between checks.
        while recent and entry.received_monotonic - recent[0] >= RATE_WINDOW_SECONDS:
            recent.popleft()

    def stats(self) -> dict[str, Any]:
        per_channel: dict[str, dict[str, Any]] = {}
        grouped: dict[str, list[SentRecord]] = {}
        for entry in self.log:
            grouped.setdefault(entry.phone_number_id, []).append(entry)
        for phone_number_id, entries in grouped.items():
            per_second: dict[str, int] = {}
            for entry in entries:
                key = str(int(entry.received_at))
                per_second[key] = per_second.get(key, 0) + 1
            per_channel[phone_number_id] = {
                "total": len(entries),
                "per_second": per_second,
                "max_in_any_1s_window": max_in_window([e.received_monotonic for e in entries]),
            }
        return {"phone_number_ids": per_channel, "refused": {str(k): v for k, v in self.refusals.items()}}


def max_in_window(times: list[float], window: float = RATE_WINDOW_SECONDS) -> int:
    """Most events in any half-open window [t, t + window) (two pointers over sorted times)."""
    ordered = sorted(times)
    best = 0
    start = 0
    for end, t in enumerate(ordered):
        while t - ordered[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


def new_wamid(wa_id: str) -> str:
    """A unique id in the look of Meta's (``wamid.`` + base64 that embeds the recipient)."""
    raw = f"{wa_id}:{uuid.uuid4().hex}".encode()
    return "wamid." + base64.b64encode(raw).decode("ascii")


def now_pair() -> tuple[float, float]:
    return time.time(), time.monotonic()
