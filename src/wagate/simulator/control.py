"""``/_sim/`` control endpoints: inspect what was sent, switch behaviours, push webhooks by hand.

- ``POST /_sim/reset``: drop the log, pending webhooks, injected failures and replaced templates, and
  restore the startup switches. The webhook URL and registered channels are wiring and stay.
- ``GET /_sim/config``; ``POST /_sim/config`` with any of ``webhook_url``, ``app_secret``,
  ``status_delays {sent, delivered, read}``, ``read_enabled``, ``reorder_statuses``,
  ``duplicate_statuses`` (true = twice, N = N copies), ``auto_statuses``,
  ``rate_limit_per_second`` (null = off),
  ``access_tokens`` (null = any), ``fail_next {count, code, to?, phone_number_id?}`` (the next
  ``count`` sends, only those to ``to`` / from ``phone_number_id`` when given: 5xx codes answer with
  that HTTP status, 408 accepts but replies late, other codes answer Meta's error with that code),
  ``fault_next {count, kind, to?, phone_number_id?}`` or a list of them (connection faults, see
  :class:`~wagate.simulator.faults.ConnectionFault`: ``reset_before|after``, ``close_before|after``,
  ``hang_before|after``; each entry is added to those waiting, a send takes the first that matches;
  an empty list drops those waiting),
  ``answer_wamid_next {to, wamid}`` (the next send to ``to`` is answered with that wamid, as an
  upstream that repeats an id it gave before would),
  ``slow_response_seconds``, ``response_latency_seconds``, ``webhook_retry_total|initial|cap``,
  ``webhook_timeout``, ``webhook_batch_window_seconds`` (statuses of one WABA due that close
  together share one POST; 0 = one status per POST). ``fail_next.to`` and
  ``answer_wamid_next.to`` may be a number or a user id (a send by ``recipient``).
  ``pricing_date`` (YYYY-MM-DD, null = today by the real clock: the day whose pricing rules the
  statuses follow, see :meth:`~wagate.simulator.state.SimulatorState.billable`),
  ``hold_template_sends`` (true, false or a share 0..1 of marketing and utility template sends answered
  ``held_for_quality_assessment``), ``held_release_seconds`` (when their statuses go; null = only by
  ``POST /_sim/held/release``).
- ``POST /_sim/held/release {phone_number_id?, to?, wamid?}``: the statuses of held sends go now.
- ``POST /_sim/webhook_burst {phone_number_id?, copies, per_post, concurrency}``: every status
  webhook sent so far posted again, ``copies`` times, ``concurrency`` POSTs at once.
- ``GET /_sim/messages?phone_number_id=&to=&wamid=&user_id=``: accepted sends, oldest first.
- ``GET /_sim/stats``: sends per phone_number_id per wall-clock second, the most in any sliding 1 s
  window, and webhook counters; ``GET /_sim/idle?seconds=5`` waits until no webhook is pending.
- ``GET|POST /_sim/channels`` ``{phone_number_id, waba_id, display_phone_number}``.
- ``GET|PUT /_sim/templates/{waba_id}`` with ``{"data": [template, ...]}`` (Meta's listing shape).
- Customers, customer messages and hand-made statuses: :mod:`wagate.simulator.control_customers`.

Bodies are pydantic models with ``extra="forbid"``, so a mistyped switch name is a 422 instead of a
silently ignored setting.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import date
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from wagate.simulator.config import ChannelInfo, StatusDelays
from wagate.simulator.customers import digits_of, is_user_id
from wagate.simulator.faults import ConnectionFault, InjectedFailure, InjectedFault
from wagate.simulator.state import SimulatorState
from wagate.simulator.templates import with_ids
from wagate.simulator.webhooks import WebhookSender


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DelaysPatch(_Body):
    sent: float | None = Field(default=None, ge=0)
    delivered: float | None = Field(default=None, ge=0)
    read: float | None = Field(default=None, ge=0)


class FailNext(_Body):
    count: int = Field(ge=0)
    code: int
    to: str | None = None
    phone_number_id: str | None = None


class FaultNext(_Body):
    count: int = Field(ge=0)
    kind: ConnectionFault
    to: str | None = None
    phone_number_id: str | None = None


class BurstBody(_Body):
    phone_number_id: str | None = None
    copies: int = Field(default=1, ge=1, le=50)
    per_post: int = Field(default=1, ge=1, le=100)
    concurrency: int = Field(default=50, ge=1, le=500)


class WamidNext(_Body):
    to: str = Field(min_length=1)
    wamid: str = Field(min_length=1)


class ConfigPatch(_Body):
    webhook_url: str | None = None
    app_secret: str | None = None
    status_delays: DelaysPatch | None = None
    read_enabled: bool | None = None
    reorder_statuses: bool | None = None
    # true = twice; a number = that many copies of each status webhook (1 = none duplicated).
    duplicate_statuses: bool | int | None = Field(default=None, ge=0, le=50)
    auto_statuses: bool | None = None
    rate_limit_per_second: int | None = Field(default=None, ge=1)
    access_tokens: list[str] | None = None
    fail_next: FailNext | None = None
    fault_next: FaultNext | list[FaultNext] | None = None
    answer_wamid_next: WamidNext | None = None
    slow_response_seconds: float | None = Field(default=None, ge=0)
    response_latency_seconds: float | None = Field(default=None, ge=0, le=30)
    webhook_retry_total: float | None = Field(default=None, ge=0)
    webhook_retry_initial: float | None = Field(default=None, gt=0)
    webhook_retry_cap: float | None = Field(default=None, gt=0)
    webhook_timeout: float | None = Field(default=None, gt=0)
    webhook_batch_window_seconds: float | None = Field(default=None, ge=0, le=5)
    # Pricing by date: the day whose rules the statuses' `pricing` follows; null = the real clock's.
    pricing_date: date | None = None
    # Template pacing: true (all), false, or the share (0..1) of marketing and utility template sends
    # answered `held_for_quality_assessment`; their statuses wait `held_release_seconds` (null: until
    # `POST /_sim/held/release`).
    hold_template_sends: bool | float | None = Field(default=None, ge=0, le=1)
    held_release_seconds: float | None = Field(default=None, ge=0, le=3600)


class ReleaseBody(_Body):
    phone_number_id: str | None = None
    to: str | None = None  # a number (any format) or a user id
    wamid: str | None = None


class ChannelBody(_Body):
    phone_number_id: str = Field(min_length=1)
    waba_id: str = Field(min_length=1)
    display_phone_number: str = "15550000000"


class TemplatesBody(_Body):
    data: list[dict[str, Any]]


# Settings whose value None is meaningful, so "sent as null" must differ from "not sent".
_NULLABLE = ("webhook_url", "rate_limit_per_second", "access_tokens", "held_release_seconds")


def build_control_router(state: SimulatorState, sender: WebhookSender) -> APIRouter:
    router = APIRouter(prefix="/_sim")

    @router.post("/reset")
    async def reset() -> dict[str, Any]:
        await sender.cancel_all()
        state.reset()
        return {"ok": True}

    @router.get("/config")
    async def get_config() -> dict[str, Any]:
        return state.config.public()

    @router.post("/config")
    async def patch_config(patch: ConfigPatch) -> dict[str, Any]:
        config = state.config
        given = patch.model_fields_set
        for name in _NULLABLE:
            if name in given:
                value = getattr(patch, name)
                setattr(config, name, set(value) if name == "access_tokens" and value is not None else value)
        for name in (
            "app_secret",
            "read_enabled",
            "reorder_statuses",
            "duplicate_statuses",
            "auto_statuses",
            "slow_response_seconds",
            "response_latency_seconds",
            "webhook_retry_total",
            "webhook_retry_initial",
            "webhook_retry_cap",
            "webhook_timeout",
            "webhook_batch_window_seconds",
            "hold_template_sends",
        ):
            value = getattr(patch, name)
            if value is not None:
                setattr(config, name, value)
        if "pricing_date" in given:
            config.pricing_date = patch.pricing_date.isoformat() if patch.pricing_date else None
        if patch.status_delays is not None:
            delays = config.status_delays
            config.status_delays = StatusDelays(
                sent=_pick(patch.status_delays.sent, delays.sent),
                delivered=_pick(patch.status_delays.delivered, delays.delivered),
                read=_pick(patch.status_delays.read, delays.read),
            )
        if patch.fail_next is not None:
            fail = patch.fail_next
            to = _recipient_key(fail.to) if fail.to else None
            state.fail_next = InjectedFailure(fail.count, fail.code, to, fail.phone_number_id)
        if patch.fault_next is not None:
            given_faults = patch.fault_next if isinstance(patch.fault_next, list) else [patch.fault_next]
            if not given_faults:  # an empty list drops every entry still waiting
                state.faults.clear()
            for item in given_faults:
                if item.count > 0:
                    to = _recipient_key(item.to) if item.to else None
                    state.faults.append(InjectedFault(item.count, item.kind, to, item.phone_number_id))
        if patch.answer_wamid_next is not None:
            state.wamid_next[_recipient_key(patch.answer_wamid_next.to)] = patch.answer_wamid_next.wamid
        return config.public()

    @router.post("/held/release")
    async def release_held(body: ReleaseBody) -> dict[str, Any]:
        """The statuses of held template sends (all, or those of a number, recipient or wamid) go now."""
        to = _recipient_key(body.to) if body.to else None
        return {"released": state.release_held(phone_number_id=body.phone_number_id, to=to, wamid=body.wamid)}

    @router.post("/webhook_burst")
    async def webhook_burst(body: BurstBody) -> dict[str, Any]:
        """Every status webhook sent so far (of one number, when given), posted again ``copies``
        times, ``concurrency`` POSTs at once: a burst of late duplicates, as Meta sends after an
        outage of its own. Answers once every POST was delivered or given up."""
        updates = [
            u
            for u in state.statuses_sent
            if body.phone_number_id is None or u.channel.phone_number_id == body.phone_number_id
        ]
        if not state.config.webhook_url:
            raise HTTPException(409, "no webhook_url is set: a burst would have nowhere to go")
        if not updates:
            return {"statuses": 0, "posts": 0, "delivered": 0, "gave_up": 0}
        posts, delivered, gave_up = await sender.burst(
            updates, copies=body.copies, per_post=body.per_post, concurrency=body.concurrency
        )
        return {
            "statuses": len(updates) * body.copies,
            "posts": posts,
            "delivered": delivered,
            "gave_up": gave_up,
        }

    @router.get("/messages")
    async def messages(
        phone_number_id: str | None = None,
        to: str | None = None,
        wamid: str | None = None,
        user_id: str | None = None,
    ) -> dict[str, Any]:
        to_digits = to.lstrip("+") if to else None
        data = [
            entry.to_json()
            for entry in state.log
            if (phone_number_id is None or entry.phone_number_id == phone_number_id)
            and (to_digits is None or (entry.to or "").lstrip("+") == to_digits)
            and (wamid is None or entry.wamid == wamid)
            and (user_id is None or entry.user_id == user_id)
        ]
        return {"data": data}

    @router.get("/stats")
    async def stats() -> dict[str, Any]:
        result = state.stats()
        counters = state.counters
        result["webhooks"] = {
            "pending": sender.pending,
            "delivered": counters.delivered,
            "failed_attempts": counters.failed_attempts,
            "gave_up": counters.gave_up,
        }
        return result

    @router.get("/idle")
    async def idle(seconds: float = 5.0) -> dict[str, Any]:
        """Wait (up to ``seconds``) until every scheduled webhook has been delivered or given up."""
        is_idle = await sender.wait_idle(min(max(seconds, 0.0), 60.0))
        return {"idle": is_idle, "pending": sender.pending}

    @router.get("/channels")
    async def list_channels() -> dict[str, Any]:
        return {"data": [asdict(c) for c in state.channels.values()]}

    @router.post("/channels")
    async def register_channel(body: ChannelBody) -> dict[str, Any]:
        info = ChannelInfo(body.phone_number_id, body.waba_id, body.display_phone_number)
        state.channels[info.phone_number_id] = info
        return asdict(info)

    @router.get("/templates/{waba_id}")
    async def get_templates(waba_id: str) -> dict[str, Any]:
        return {"data": state.templates_for(waba_id)}

    @router.put("/templates/{waba_id}")
    async def put_templates(waba_id: str, body: TemplatesBody | list[dict[str, Any]]) -> dict[str, Any]:
        items = body.data if isinstance(body, TemplatesBody) else body
        state.templates[waba_id] = with_ids(waba_id, items)
        return {"data": state.templates[waba_id]}

    return router


def _recipient_key(to: str) -> str:
    """How ``fail_next`` / ``answer_wamid_next`` name a recipient: a user id, or a number's digits."""
    to = to.strip()
    return to if is_user_id(to) else digits_of(to)


def _pick(value: float | None, default: float) -> float:
    return default if value is None else value
