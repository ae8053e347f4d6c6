"""The simulator's in-memory state.

All of it lives on the simulator's own event loop and is touched only from there (request handlers
and webhook tasks), so it needs no locks. Tests and the sandbox reach it over the ``/_sim/`` HTTP
endpoints. Its settings are `config.SimulatorConfig`, the sends it accepted `send_log.SentRecord`s.
"""

from __future__ import annotations

import asyncio
import copy
import math
from collections import deque
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from wagate.simulator.config import ChannelInfo, SimulatorConfig
from wagate.simulator.customers import CustomerBook
from wagate.simulator.faults import ConnectionFault, InjectedFailure, InjectedFault
from wagate.simulator.send_log import RATE_WINDOW_SECONDS, SentRecord, max_in_window
from wagate.simulator.templates import seed_for

if TYPE_CHECKING:
    from wagate.simulator.payloads import StatusUpdate

# Meta's announcement of 2026-07-01: from this UTC day a session (free-form) message is charged at the
# utility rate, and a utility template inside the customer's window is charged too (docs/simulator.md).
SESSIONS_CHARGED_FROM = date(2026, 10, 1)
# Template pacing holds marketing and utility templates only (Meta, "Template pacing").
PACED_CATEGORIES = ("MARKETING", "UTILITY")
# How many of the statuses handed out `/_sim/webhook_burst` can post again.
STATUSES_KEPT = 100_000


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
