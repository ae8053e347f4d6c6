"""A channel's send lane: claims its due sends best priority first, paces them to the channel's limit,
calls Meta for each as a task of its own, and records the outcomes in batches.

One lane per channel this process owns (see dispatcher.py); it gets what it needs as a `LaneDeps`.
The sends it claimed ahead wait in its queue (send_queue.py). It is the `SendRoom` of its channel
(outbox/fast_claims.py): the API takes room in it for a single send and starts that send's call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice, takewhile

from sqlalchemy.orm import Session

from wagate.channels.models import Channel
from wagate.core.db import utcnow
from wagate.dispatch import sends
from wagate.dispatch.deps import LaneDeps
from wagate.dispatch.send_queue import POLL_SECONDS, LaneQueue
from wagate.events.subscriptions import current_subscriptions
from wagate.observability.logs import log_send
from wagate.outbox.fast_claims import SendRoom
from wagate.outbox.isolation import log_failure, write_isolating
from wagate.outbox.limiter import SlidingWindowLimiter
from wagate.outbox.models import ClaimedSend, Priority, expired_error
from wagate.outbox.recorder import BatchRecorder
from wagate.outbox.retry import CHANNEL_THROTTLED
from wagate.whatsapp.errors import (
    NotDelivered,
    ThrottlingError,
    Unconfirmed,
    UpstreamError,
    UpstreamRejected,
    stops_the_channel,
)
from wagate.whatsapp.http1 import Written

log = logging.getLogger(__name__)

# How a send's outcome is named in the metrics and the log.
_RESULTS: dict[type, str] = {
    sends.Sent: "sent",
    sends.Rejected: "failed",
    sends.Retry: "retry",
    sends.Unknown: "unconfirmed",
    sends.Held: "held",
}

CONFIG_REFRESH_SECONDS = 60.0
# Refusals that name no cause in the message (see ChannelLane._send) after which the channel pauses.
UNEXPLAINED_FAILURES_TO_PAUSE = 10


def _is_single(claimed: ClaimedSend) -> bool:
    return claimed.priority < Priority.bulk


@dataclass
class ChannelConfig:
    phone_number_id: str
    access_token: str
    messages_per_second: int
    paused: bool = False  # Meta refuses the channel (see Held): only a probe send goes


class ChannelLane(LaneQueue, SendRoom):
    """Sends one channel's messages, best priority first, never faster than its limit.

    Calls run as tasks of their own and their outcomes are recorded in batches, so one slow answer
    from Meta holds up nothing but itself; at most `max_in_flight` calls are open at once.
    """

    def __init__(self, deps: LaneDeps, channel_id: int, wake_events: Callable[[], None]) -> None:
        self.deps = deps
        self.channel_id = channel_id
        self.worker_id = deps.worker_id
        self.lease_seconds = deps.lease_seconds
        self.wake_events = wake_events
        self.limiter = SlidingWindowLimiter(80, receipt_margin=deps.settings.upstream_receipt_margin_seconds)
        self.config: ChannelConfig | None = None
        self.config_loaded_at = 0.0
        self.wake_event = asyncio.Event()
        self.throttled_until = 0.0
        self.throttle_count = 0
        # While Meta refuses the channel itself: nothing is sent until this moment, then one probe.
        self.paused_until = 0.0
        self.resumed = False  # a probe went through: the next record clears the channel's pause
        self.unexplained_in_a_row = 0
        self.calls: set[asyncio.Task[None]] = set()
        # Rows traded for single sends, being given back (see _trade_for_singles).
        self.giving_back: set[asyncio.Task[None]] = set()
        # Rows claimed ahead of their moment (see _round); given back if the lane stops.
        self.claimed: deque[ClaimedSend] = deque()
        # Every row this lane holds `in_flight`: claimed ahead, under way, or its outcome not yet
        # recorded. Their leases are renewed while held, so no process takes one for orphaned.
        self.holding: set[int] = set()
        self.claim_now = False
        # The claim ahead under way (see _round): one at a time, and the round goes on sending beside it.
        self.claiming: asyncio.Task[None] | None = None
        self.claim_seconds = 0.0  # how long the last claim ahead took, from asking to its rows queued
        # When a claim last found fewer due rows than it asked for: until a wake-up says rows came, or
        # a poll interval has passed (rows due later: a retry's back-off), claiming again finds none.
        self.drained_at = -math.inf
        self.stopping = False
        self.task = asyncio.create_task(self._run(), name=f"wagate-lane-{channel_id}")
        self.recorder = BatchRecorder(f"channel {channel_id}", self._record)
        self.lease_keeper = asyncio.create_task(self._keep_leases(), name=f"wagate-leases-{channel_id}")

    def wake(self) -> None:
        """New rows were stored for the channel (a batch, or sends the lane could not take): claim
        them now."""
        self.claim_now = True
        self.wake_event.set()

    async def stop(self) -> None:
        """Claim nothing more, let open calls finish (bounded by their timeout), record them."""
        self.stopping = True
        self.wake()
        # A round ends by itself within moments; cancelling one mid-claim would strand what it claimed.
        await asyncio.wait({self.task}, timeout=2.0)
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self._give_back_claimed()
        if self.giving_back:
            await asyncio.gather(*self.giving_back, return_exceptions=True)
            await self._give_back_claimed()  # what a failed give-back put back in the queue
        if self.calls:
            await asyncio.wait(self.calls, timeout=self.deps.settings.upstream_timeout_seconds + 1)
        self.lease_keeper.cancel()
        await asyncio.gather(self.lease_keeper, return_exceptions=True)
        await self.recorder.close()  # rows left in_flight are settled after the grace period

    async def _load_config(self) -> ChannelConfig | None:
        if self.config is None or time.monotonic() - self.config_loaded_at > CONFIG_REFRESH_SECONDS:
            async with self.deps.db.read() as session:
                channel = await session.get(Channel, self.channel_id)
            if channel is None:
                return None
            self.config = ChannelConfig(
                channel.phone_number_id,
                self.deps.secret_box.decrypt(channel.access_token_encrypted),
                channel.messages_per_second,
                paused=channel.paused_reason is not None,
            )
            self.limiter.set_rate(channel.messages_per_second)
            self.config_loaded_at = time.monotonic()
        return self.config

    async def _run(self) -> None:
        while not self.stopping:
            try:
                # Cleared before the round, so a wake-up that comes during it is not lost.
                self.wake_event.clear()
                if not await self._round():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.wake_event.wait(), timeout=POLL_SECONDS)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log_failure(log, "send lane of channel %s failed a round; going on", exc, self.channel_id)
                await asyncio.sleep(POLL_SECONDS)

    async def _round(self) -> bool:
        """Start the sends that are due and allowed now; False when there was nothing to send.

        The next slices' rows are claimed ahead, while the current ones wait for their moment: a
        claim's round trip to the database would otherwise come on top of every slice, and the
        channel would fall short of its rate by that much. The claim runs beside the rounds, which
        go on starting the queued sends meanwhile; a round waits for it only when nothing is queued.
        A round that awaited the claim sent nothing while it ran (100-480 ms behind a busy writer on
        a slow machine), and then the tokens saved meanwhile in one burst
        (docs/decisions/0006-pacing.md).
        """
        pause = self.throttled_until - time.monotonic()
        if pause > 0:
            # Meta throttles the channel for up to a minute: what waits here goes back, so its lease
            # cannot run out while it waits (the lane claims it again, first, after the pause).
            await self._give_back_claimed()
            await asyncio.sleep(pause)
        config = await self._load_config()
        if config is None or self.stopping:
            return False
        if config.paused:
            return await self._probe_round()
        while len(self.calls) >= self.max_in_flight:
            await asyncio.wait(self.calls, return_when=asyncio.FIRST_COMPLETED)
        self._start_sends()  # what may go now goes before the claim's round trip to the database
        drained = time.monotonic() - self.drained_at < POLL_SECONDS
        wanted = self.claim_now or (not drained and len(self.claimed) < self._claim_low_water())
        if wanted and not self._claim_under_way():
            self.claim_now = False
            self.claiming = asyncio.create_task(self._claim_beside(), name=f"wagate-claim-{self.channel_id}")
        if not self.claimed and self._claim_under_way():
            await self._claim_settled()  # nothing to send before it comes back
        if not self.claimed:
            return False
        wait = self.limiter.wait_time(single=self._single_first())
        if wait > 0:
            # A wake-up (a single send stored meanwhile) ends the wait: it needs no token, only a claim.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake_event.wait(), timeout=wait)
        if not self.stopping:
            self._start_sends()
        return True

    async def _probe_round(self) -> bool:
        """A paused channel sends one message at a time, every `channel_probe_seconds`: when Meta
        takes it, the channel resumes (record_outcomes clears the pause); when Meta refuses it
        again, it waits, uncounted, with the others."""
        await self._give_back_claimed()
        wait = self.paused_until - time.monotonic()
        if wait > 0:
            # New rows wake the lane as usual; they wait with the others (stop() wakes it too).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake_event.wait(), timeout=wait)
            return False
        if self.calls:  # the probe is under way
            await asyncio.wait(self.calls)
            return True
        self.paused_until = time.monotonic() + self.deps.settings.channel_probe_seconds
        await self._claim_ahead(limit=1)
        if self.claimed:
            self.send_now(self.claimed.popleft(), self.limiter.record(1))
            return True
        return False

    def _single_first(self) -> bool:
        return bool(self.claimed) and _is_single(self.claimed[0])

    def _start_sends(self) -> None:
        """Start what the limiter allows now: single sends first, as far as the window has room, then
        bulk ones as far as the tokens go."""
        while self.claimed:
            single = self._single_first()
            count = min(self.limiter.available(single=single), self.max_in_flight - len(self.calls))
            if count <= 0:
                return
            # The queue is sorted best priority first, so its single sends lead it: count them only as
            # far as they can go now (the queue holds up to half a second of a 1000/s channel).
            leading = takewhile(_is_single, self.claimed) if single else iter(self.claimed)
            count = sum(1 for _ in islice(leading, count))
            stamp = self.limiter.record(count)
            for _ in range(count):
                self.send_now(self.claimed.popleft(), stamp)

    async def _call(self, config: ChannelConfig, claimed: ClaimedSend, stamp: float) -> None:
        written = Written()
        outcome = await self._send(config, claimed, written)
        answered = time.monotonic()
        self.limiter.restamp(stamp, written.at, answered)
        self.recorder.add(outcome)
        self._observe(outcome, answered - written.at if written.at is not None else None)

    def _observe(self, outcome: sends.Outcome, upstream_seconds: float | None) -> None:
        """The send's count in the metrics and its line in the log (docs/operations.md)."""
        result = _RESULTS[type(outcome)]
        self.deps.metrics.send(self.channel_id, result, upstream_seconds)
        claimed = outcome.send
        error = None
        if isinstance(outcome, sends.Rejected):
            error = outcome.external_error
        elif not isinstance(outcome, sends.Sent):
            error = outcome.error
        log_send(
            message_id=claimed.message_id,
            channel=self.channel_id,
            result=result,
            wamid=outcome.wamid if isinstance(outcome, sends.Sent) else None,
            request_id=claimed.request_id,
            attempt=claimed.attempts,
            upstream_ms=None if upstream_seconds is None else round(upstream_seconds * 1000, 2),
            error=error,
        )

    async def _send(self, config: ChannelConfig, claimed: ClaimedSend, written: Written) -> sends.Outcome:
        if claimed.expired(utcnow()):
            # Past its validity period (a backlog, a throttled or paused channel, a restart): never sent.
            return sends.Rejected(claimed, expired_error(claimed.validity_seconds))
        client = self.deps.client
        try:
            result = await client.send_message(
                config.phone_number_id,
                config.access_token,
                claimed.body,
                urgent=claimed.priority < Priority.bulk,
                written=written,
            )
        except ThrottlingError as exc:
            now = time.monotonic()
            # The answers of calls that were under way together when Meta began to throttle are one
            # throttle, not one each: counted apiece, a storm of them would stretch the pause to its cap.
            if now >= self.throttled_until:
                self.throttle_count += 1
                self.throttled_until = now + CHANNEL_THROTTLED.delay(self.throttle_count)
            return sends.Retry(claimed, exc.external_error)
        except NotDelivered as exc:
            return sends.Retry(claimed, str(exc))
        except Unconfirmed as exc:
            return sends.Unknown(claimed, str(exc))
        except UpstreamError as exc:
            # Errors no rule explains by the message (not its number, template or parameters), many
            # in a row: the channel itself is likely broken.
            unexplained = type(exc) is UpstreamRejected
            self.unexplained_in_a_row = self.unexplained_in_a_row + 1 if unexplained else 0
            if stops_the_channel(exc) or self.unexplained_in_a_row >= UNEXPLAINED_FAILURES_TO_PAUSE:
                # Every send would fail the same way: they wait, and the channel is paused.
                config.paused = True
                self.paused_until = time.monotonic() + self.deps.settings.channel_probe_seconds
                reason = exc.external_error
                if not stops_the_channel(exc):
                    reason = f"{self.unexplained_in_a_row} sends in a row refused; the last: {reason}"
                return sends.Held(claimed, reason)
            if config.paused:  # Meta answered about the message, not the channel: it sends again
                config.paused = False
                self.resumed = True
            return sends.Rejected(claimed, exc.external_error)
        self.throttle_count = 0
        self.unexplained_in_a_row = 0
        if config.paused:
            config.paused = False  # Meta took the probe: the lane sends at its rate again
            self.resumed = True
        # `accepted` (or no word) is the usual answer; anything else is kept on the message as Meta said it.
        held = result.message_status if result.message_status not in (None, "accepted") else None
        return sends.Sent(claimed, result.wamid, held[: sends.UPSTREAM_STATUS_LENGTH] if held else None)

    async def _record(self, batch: list[sends.Outcome]) -> list[sends.Outcome]:
        """Store a round of outcomes (one bad one is parked, see isolation.py); returns those that
        must wait for the next try. They stay held, their leases renewed, so no one sends them again."""
        grace = self.deps.settings.unconfirmed_send_grace_seconds
        subscriptions = await current_subscriptions(self.deps.caches)
        resumed, self.resumed = self.resumed, False

        def record(session: Session, outcomes: Sequence[sends.Outcome]) -> int:
            return sends.record_outcomes(
                session,
                list(outcomes),
                grace_seconds=grace,
                subscriptions=subscriptions,
                prices=self.deps.settings.price_list,
                resumed_channel=self.channel_id if resumed else None,
            )

        events, unwritten = await write_isolating(self.deps.db, batch, record, sends.park_outcome, first=True)
        kept = {o.send.job_id for o in unwritten}
        self.holding.difference_update(o.send.job_id for o in batch if o.send.job_id not in kept)
        if sum(events):
            self.wake_events()
        return unwritten
