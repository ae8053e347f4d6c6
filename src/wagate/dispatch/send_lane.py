"""A channel's send lane: claims its due sends best priority first, paces them to the channel's limit,
calls Meta for each as a task of its own, and records the outcomes in batches.

One lane per channel this process owns (see dispatcher.py); it gets what it needs as a `LaneDeps`.
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
from datetime import timedelta
from functools import partial
from itertools import islice, takewhile

from sqlalchemy.orm import Session

from wagate.channels.models import Channel
from wagate.core.db import utcnow
from wagate.dispatch import sends
from wagate.dispatch.deps import LaneDeps
from wagate.observability.logs import log_send
from wagate.outbox.isolation import log_failure, write_isolating
from wagate.outbox.limiter import SlidingWindowLimiter
from wagate.outbox.models import ClaimedSend, FastClaim, Priority, expired_error
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

log = logging.getLogger(__name__)

# How a send's outcome is named in the metrics and the log.
_RESULTS: dict[type, str] = {
    sends.Sent: "sent",
    sends.Rejected: "failed",
    sends.Retry: "retry",
    sends.Unknown: "unconfirmed",
    sends.Held: "held",
}

POLL_SECONDS = 1.0
MAX_CLAIM = 500  # sends claimed at once
# Rows for the coming half second are claimed ahead (at most MAX_CLAIM), again whenever fewer than
# half of that wait: a claim that waits behind a busy writer or a slow commit then costs no sends.
# Not more: after a crash, rows claimed but never sent wait out their lease like sent ones.
CLAIM_AHEAD_SECONDS = 0.5
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


class ChannelLane:
    """Sends one channel's messages, best priority first, never faster than its limit.

    Calls run as tasks of their own and their outcomes are recorded in batches, so one slow answer
    from Meta holds up nothing but itself; at most `max_in_flight` calls are open at once.
    """

    def __init__(self, deps: LaneDeps, channel_id: int, wake_events: Callable[[], None]) -> None:
        self.deps = deps
        self.channel_id = channel_id
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

    @property
    def max_in_flight(self) -> int:
        return max(16, 2 * self.limiter.rate)

    def wake(self) -> None:
        """New rows were stored for the channel (a batch, or sends the lane could not take): claim
        them now."""
        self.claim_now = True
        self.wake_event.set()

    def prepare_claim(self) -> FastClaim | None:
        """Room for a single send the API will store already claimed and start at once (no token
        needed: see the limiter). None when the lane cannot send it now: the row is stored ready, the
        lane is woken, and it claims the row ahead of every bulk send at the window's next room."""
        if self.config is None or self.stopping or time.monotonic() < self.throttled_until:
            return None
        if self.config.paused:  # the row waits with the channel's others; a probe goes first
            return None
        if len(self.calls) >= self.max_in_flight:
            return None
        hold = self.limiter.reserve()
        if hold is None:
            return None
        locked_until = utcnow() + timedelta(seconds=self.deps.lease_seconds)

        def started(claimed: ClaimedSend) -> None:
            self.send_now(claimed, self.limiter.settle(hold))

        return FastClaim(self.deps.worker_id, locked_until, started)

    def send_now(self, claimed: ClaimedSend, stamp: float) -> None:
        """Call Meta for a claimed send whose slot the limiter logged at `stamp`."""
        if self.config is None:  # cannot happen once a round or reserve() ran
            return
        self.holding.add(claimed.job_id)
        call = asyncio.create_task(self._call(self.config, claimed, stamp))
        self.calls.add(call)
        call.add_done_callback(self.calls.discard)

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

    def _claim_ahead_size(self) -> int:
        return min(MAX_CLAIM, math.ceil(CLAIM_AHEAD_SECONDS * self.limiter.rate))

    def _claim_low_water(self) -> int:
        """Claim again once fewer sends than this are queued: half the claim ahead, or what the
        channel sends in twice the time the last claim took, when that is more. A claim waits behind
        the writer's batch under way, which a busy writer on a slow machine makes 150-480 ms: with
        the queue at half of half a second, a 1000/s channel ran dry and waited for the claim
        (docs/decisions/0006-pacing.md). Up to the whole claim ahead: the next claim then
        starts as soon as one comes back, each for what was sent meanwhile."""
        size = self._claim_ahead_size()
        return min(size, max(size // 2, math.ceil(2 * self.claim_seconds * self.limiter.rate)))

    def _claim_under_way(self) -> bool:
        return self.claiming is not None and not self.claiming.done()

    async def _claim_settled(self) -> None:
        """Wait for the claim under way, if any. Not cancelled with the caller: a claim stopped midway
        would strand the rows it took until their lease ran out."""
        if self.claiming is not None:
            await asyncio.wait({self.claiming})

    async def _claim_beside(self) -> None:
        started = time.monotonic()
        try:
            await self._claim_ahead()
            self.claim_seconds = time.monotonic() - started
        except Exception as exc:
            log_failure(log, "send lane of channel %s failed a claim; going on", exc, self.channel_id)
            await asyncio.sleep(POLL_SECONDS)  # as a failed round does, not a claim per turn of the loop
        finally:
            self.wake_event.set()  # the round looks at what came

    async def _give_back_claimed(self) -> None:
        """Rows claimed ahead that will not be sent now: ready again, for this lane or another (with
        what a claim under way brings)."""
        await self._claim_settled()
        if self.claimed:
            unsent, self.claimed = [c.job_id for c in self.claimed], deque()
            await self.deps.db.write(lambda session: sends.unclaim(session, unsent))
            self.holding.difference_update(unsent)
            self.drained_at = -math.inf  # they are due again: the next round claims them

    async def _claim_ahead(self, limit: int | None = None) -> None:
        """Claim the coming half second's sends, single sends before bulk ones.

        The lane never holds more than that, however often it is woken. When it is full and woken
        for a single send, it trades bulk rows from the end of its queue for waiting single sends, so
        an OTP does not wait for the queue to drain.
        """
        room = (limit if limit is not None else self._claim_ahead_size()) - len(self.claimed)
        if room <= 0:
            await self._trade_for_singles()
            return
        fresh = await self._claim(room)
        # Short: nothing more is due until a wake-up or the poll interval. Full: more may be, and an
        # earlier short claim (the idle poll before a batch came) no longer says otherwise.
        self.drained_at = time.monotonic() if len(fresh) < room else -math.inf
        self._queue(fresh)

    async def _trade_for_singles(self) -> None:
        """The lane is full and single sends wait: claim them, and give back as many bulk rows from
        the end of the queue.

        Only the claim is awaited. Giving the rows back writes rows a lease renewal in a batch may
        hold, so it queues on the writer behind whatever batch of outcomes or statuses is running, and
        a round that waited for it sent nothing meanwhile: 0.3-0.8 s without a send, every second or
        so, on a worker applying the statuses of two busy channels (tests/dispatch/test_scale_out.py).
        """
        tail = [c for c in reversed(self.claimed) if c.priority >= Priority.bulk]
        limit = min(len(tail), self.limiter.slice_rate)
        if limit <= 0:
            return
        fresh = await self._claim(limit, singles_only=True)
        if not fresh:
            return
        traded = tail[: len(fresh)]
        given = {c.job_id for c in traded}
        self.claimed = deque(c for c in self.claimed if c.job_id not in given)
        # No longer this lane's to send or to keep the lease of; should giving them back fail, they are
        # this lane's again (`_give_back`).
        self.holding.difference_update(given)
        self._queue(fresh)
        task = asyncio.create_task(self._give_back(traded), name=f"wagate-give-back-{self.channel_id}")
        self.giving_back.add(task)
        task.add_done_callback(self.giving_back.discard)

    async def _claim(self, limit: int, *, singles_only: bool = False) -> list[ClaimedSend]:
        """Up to `limit` due sends of the channel, best priority first. A claim commits beside the
        batches of outcomes and statuses (`Database.write(claim=True)`): it waits on no row lock."""
        lease = self.deps.lease_seconds

        def claim(session: Session) -> list[ClaimedSend]:
            return sends.claim_sends(
                session,
                channel_id=self.channel_id,
                limit=limit,
                worker_id=self.deps.worker_id,
                lease_seconds=lease,
                singles_only=singles_only,
            )

        fresh: list[ClaimedSend] = await self.deps.db.write(claim, first=True, claim=True)
        return fresh

    async def _give_back(self, rows: list[ClaimedSend]) -> None:
        """Rows traded for single sends: ready again, for this lane or another."""
        job_ids = [c.job_id for c in rows]
        try:
            await self.deps.db.write(lambda session: sends.unclaim(session, job_ids), first=True)
        except Exception as exc:  # still claimed by this process: they go out with the others
            log_failure(
                log, "channel %s could not give back %d traded sends", exc, self.channel_id, len(rows)
            )
            self._queue(rows)
            return
        # Due again: were the lane left drained, they would wait out a poll interval (a 1 s gap in a
        # 1000/s batch after an OTP came).
        self.drained_at = -math.inf

    def _queue(self, fresh: Sequence[ClaimedSend]) -> None:
        """Claimed rows join the queue, best priority first; a row is held once, never queued twice."""
        fresh = [c for c in fresh if c.job_id not in self.holding]
        if fresh:
            self.holding.update(c.job_id for c in fresh)
            self.claimed = deque(sorted([*self.claimed, *fresh], key=lambda c: (c.priority, c.job_id)))

    async def _keep_leases(self) -> None:
        """Renew the leases of the rows this lane holds, a few times per lease; a row that is no longer
        this lane's (taken for orphaned while the lane stalled) leaves the queue unsent."""
        lease = self.deps.lease_seconds
        worker_id = self.deps.worker_id
        while True:
            await asyncio.sleep(lease / 4)
            held = list(self.holding)
            try:
                owned = await self.deps.db.write(
                    partial(sends.renew_leases, job_ids=held, worker_id=worker_id, lease_seconds=lease),
                    first=True,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log_failure(log, "renewing the leases of channel %s failed; retrying", exc, self.channel_id)
                continue
            # Rows already sent may be gone from the table; only queued ones can still be kept back.
            lost = {c.job_id for c in self.claimed if c.job_id in set(held) - owned}
            if lost:
                log.warning(
                    "channel %s: %d claimed sends were no longer ours; not sent", self.channel_id, len(lost)
                )
                self.claimed = deque(c for c in self.claimed if c.job_id not in lost)
                self.holding.difference_update(lost)

    async def _call(self, config: ChannelConfig, claimed: ClaimedSend, stamp: float) -> None:
        written: list[float] = []
        outcome = await self._send(config, claimed, on_sent=lambda: written.append(time.monotonic()))
        answered = time.monotonic()
        self.limiter.restamp(stamp, written[0] if written else None, answered)
        self.recorder.add(outcome)
        self._observe(outcome, answered - written[0] if written else None)

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

    async def _send(
        self, config: ChannelConfig, claimed: ClaimedSend, on_sent: Callable[[], None]
    ) -> sends.Outcome:
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
                on_sent=on_sent,
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
        subscriptions = await self.deps.lookups.subscriptions()
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
