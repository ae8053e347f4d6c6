"""The dispatcher: drains the outbox. Sends go through one paced lane per channel; the rest are jobs.

It runs inside `wagate serve` or alone as `wagate worker`. The API wakes it after each commit (and on
PostgreSQL other processes' commits wake it by NOTIFY), so a send starts at once; a one-second poll is
only the fallback, for rows that are due later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from wagate.channels.models import Channel
from wagate.config import Settings
from wagate.db import Database, utcnow
from wagate.events.subscriptions import Subscriptions
from wagate.lookups import Lookups
from wagate.outbox import jobs, sends
from wagate.outbox.errors import describe_error
from wagate.outbox.event_lane import EventLane
from wagate.outbox.isolation import write_isolating
from wagate.outbox.limiter import SlidingWindowLimiter
from wagate.outbox.models import JobKind, JobState, OutboxJob, Priority
from wagate.outbox.notify import listen_outbox
from wagate.outbox.ownership import ownership_for
from wagate.outbox.retry import CHANNEL_THROTTLED
from wagate.security import SecretBox
from wagate.whatsapp.client import CloudApiClient
from wagate.whatsapp.errors import NotDelivered, ThrottlingError, Unconfirmed, UpstreamError

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
MAX_CLAIM = 500  # sends claimed at once
# Rows for the coming half second are claimed ahead (at most MAX_CLAIM), again whenever fewer than
# half of that wait: a claim that waits behind a busy writer or a slow commit then costs no sends.
# Not more: after a crash, rows claimed but never sent wait out their lease like sent ones.
CLAIM_AHEAD_SECONDS = 0.5
CONFIG_REFRESH_SECONDS = 60.0


@dataclass(frozen=True)
class SendSlot:
    """Room in a lane's window for a single send, held while the API stores it already claimed."""

    lane: ChannelLane
    hold: float  # the limiter's stamp for it

    def start(self, claimed: sends.ClaimedSend) -> None:
        """The send is stored: call Meta now."""
        self.lane.send_now(claimed, self.lane.limiter.settle(self.hold))


@dataclass
class ChannelConfig:
    phone_number_id: str
    access_token: str
    messages_per_second: int


class RecordingFailed(Exception):
    """Some results could not be stored yet: the recorder tries them again after a pause."""


class ChannelLane:
    """Sends one channel's messages, best priority first, never faster than its limit.

    Calls run as tasks of their own and their outcomes are recorded in batches, so one slow answer
    from Meta holds up nothing but itself; at most `max_in_flight` calls are open at once.
    """

    def __init__(self, dispatcher: Dispatcher, channel_id: int) -> None:
        self.dispatcher = dispatcher
        self.channel_id = channel_id
        self.limiter = SlidingWindowLimiter(
            80, receipt_margin=dispatcher.settings.upstream_receipt_margin_seconds
        )
        self.config: ChannelConfig | None = None
        self.config_loaded_at = 0.0
        self.wake_event = asyncio.Event()
        self.throttled_until = 0.0
        self.throttle_count = 0
        self.calls: set[asyncio.Task[None]] = set()
        self.outcomes: list[sends.Outcome] = []
        self.outcome_ready = asyncio.Event()
        # Rows claimed ahead of their moment (see _round); given back if the lane stops.
        self.claimed: deque[sends.ClaimedSend] = deque()
        # Every row this lane holds `in_flight`: claimed ahead, under way, or its outcome not yet
        # recorded. Their leases are renewed while held, so no process takes one for orphaned.
        self.holding: set[int] = set()
        self.claim_now = False
        self.stopping = False
        self.task = asyncio.create_task(self._run(), name=f"wagate-lane-{channel_id}")
        self.recorder = asyncio.create_task(self._record_outcomes(), name=f"wagate-record-{channel_id}")
        self.lease_keeper = asyncio.create_task(self._keep_leases(), name=f"wagate-leases-{channel_id}")

    @property
    def max_in_flight(self) -> int:
        return max(16, 2 * self.limiter.rate)

    def wake(self) -> None:
        """New rows were stored for the channel (a batch, or sends the lane could not take): claim
        them now."""
        self.claim_now = True
        self.wake_event.set()

    def reserve(self) -> SendSlot | None:
        """Room for a single send the API will store already claimed and start at once (no token
        needed: see the limiter). None when the lane cannot send it now: the row is stored ready, the
        lane is woken, and it claims the row ahead of every bulk send at the window's next room."""
        if self.config is None or self.stopping or time.monotonic() < self.throttled_until:
            return None
        if len(self.calls) >= self.max_in_flight:
            return None
        hold = self.limiter.reserve()
        return SendSlot(self, hold) if hold is not None else None

    def send_now(self, claimed: sends.ClaimedSend, stamp: float) -> None:
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
        if self.calls:
            await asyncio.wait(self.calls, timeout=self.dispatcher.settings.upstream_timeout_seconds + 1)
        self.recorder.cancel()
        self.lease_keeper.cancel()
        await asyncio.gather(self.recorder, self.lease_keeper, return_exceptions=True)
        await self._flush_outcomes()  # rows left in_flight are settled after the grace period

    async def _load_config(self) -> ChannelConfig | None:
        if self.config is None or time.monotonic() - self.config_loaded_at > CONFIG_REFRESH_SECONDS:
            async with self.dispatcher.db.read() as session:
                channel = await session.get(Channel, self.channel_id)
            if channel is None:
                return None
            self.config = ChannelConfig(
                channel.phone_number_id,
                self.dispatcher.secret_box.decrypt(channel.access_token_encrypted),
                channel.messages_per_second,
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
            except Exception:
                log.exception("send lane of channel %s failed a round; going on", self.channel_id)
                await asyncio.sleep(POLL_SECONDS)

    async def _round(self) -> bool:
        """Start the sends that are due and allowed now; False when there was nothing to send.

        The next slices' rows are claimed ahead, while the current ones wait for their moment: a
        claim's round trip to the database would otherwise come on top of every slice, and the
        channel would fall short of its rate by that much.
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
        while len(self.calls) >= self.max_in_flight:
            await asyncio.wait(self.calls, return_when=asyncio.FIRST_COMPLETED)
        self._start_sends()  # what may go now goes before the claim's round trip to the database
        if self.claim_now or len(self.claimed) < self._claim_ahead_size() // 2:
            self.claim_now = False
            await self._claim_ahead()
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

    def _single_first(self) -> bool:
        return bool(self.claimed) and self.claimed[0].priority < Priority.bulk

    def _start_sends(self) -> None:
        """Start what the limiter allows now: single sends first, as far as the window has room, then
        bulk ones as far as the tokens go."""
        while self.claimed:
            single = self._single_first()
            count = min(
                self.limiter.available(single=single),
                self.max_in_flight - len(self.calls),
                sum(1 for c in self.claimed if c.priority < Priority.bulk) if single else len(self.claimed),
            )
            if count <= 0:
                return
            stamp = self.limiter.record(count)
            for _ in range(count):
                self.send_now(self.claimed.popleft(), stamp)

    def _claim_ahead_size(self) -> int:
        return min(MAX_CLAIM, math.ceil(CLAIM_AHEAD_SECONDS * self.limiter.rate))

    async def _give_back_claimed(self) -> None:
        """Rows claimed ahead that will not be sent now: ready again, for this lane or another."""
        if self.claimed:
            unsent, self.claimed = [c.job_id for c in self.claimed], deque()
            await self.dispatcher.db.write(lambda session: sends.unclaim(session, unsent))
            self.holding.difference_update(unsent)

    async def _claim_ahead(self) -> None:
        """Claim the coming half second's sends, single sends before bulk ones.

        The lane never holds more than that, however often it is woken. When it is full and woken
        for a single send, it trades bulk rows from the end of its queue for waiting single sends, so
        an OTP does not wait for the queue to drain.
        """
        room = self._claim_ahead_size() - len(self.claimed)
        tail = [] if room > 0 else [c.job_id for c in reversed(self.claimed) if c.priority >= Priority.bulk]
        limit = room if room > 0 else min(len(tail), self.limiter.slice_rate)
        if limit <= 0:
            return
        lease = self.dispatcher.in_flight_lease_seconds

        def claim(session: Session) -> tuple[list[sends.ClaimedSend], list[int]]:
            fresh = sends.claim_sends(
                session,
                channel_id=self.channel_id,
                limit=limit,
                worker_id=self.dispatcher.worker_id,
                lease_seconds=lease,
                singles_only=room <= 0,
            )
            traded = tail[: len(fresh)] if room <= 0 else []
            if traded:
                sends.unclaim(session, traded)
            return fresh, traded

        fresh, traded = await self.dispatcher.db.write(claim, first=True)
        if traded:
            self.claimed = deque(c for c in self.claimed if c.job_id not in set(traded))
            self.holding.difference_update(traded)
        # A row is held once: one this lane already holds is never queued a second time.
        fresh = [c for c in fresh if c.job_id not in self.holding]
        if fresh:
            self.holding.update(c.job_id for c in fresh)
            self.claimed = deque(sorted([*self.claimed, *fresh], key=lambda c: (c.priority, c.job_id)))

    async def _keep_leases(self) -> None:
        """Renew the leases of the rows this lane holds, a few times per lease; a row that is no longer
        this lane's (taken for orphaned while the lane stalled) leaves the queue unsent."""
        lease = self.dispatcher.in_flight_lease_seconds
        worker_id = self.dispatcher.worker_id
        while True:
            await asyncio.sleep(lease / 4)
            held = list(self.holding)
            try:
                owned = await self.dispatcher.db.write(
                    partial(sends.renew_leases, job_ids=held, worker_id=worker_id, lease_seconds=lease),
                    first=True,
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("renewing the leases of channel %s failed; retrying", self.channel_id)
                continue
            # Rows already sent may be gone from the table; only queued ones can still be kept back.
            lost = {c.job_id for c in self.claimed if c.job_id in set(held) - owned}
            if lost:
                log.warning(
                    "channel %s: %d claimed sends were no longer ours; not sent", self.channel_id, len(lost)
                )
                self.claimed = deque(c for c in self.claimed if c.job_id not in lost)
                self.holding.difference_update(lost)

    async def _call(self, config: ChannelConfig, claimed: sends.ClaimedSend, stamp: float) -> None:
        written: list[float] = []
        outcome = await self._send(config, claimed, on_sent=lambda: written.append(time.monotonic()))
        self.limiter.restamp(stamp, written[0] if written else None)
        # Appended after the await: the recorder may have swapped the list in the meantime.
        self.outcomes.append(outcome)
        self.outcome_ready.set()

    async def _send(
        self, config: ChannelConfig, claimed: sends.ClaimedSend, on_sent: Callable[[], None]
    ) -> sends.Outcome:
        client = self.dispatcher.client
        try:
            result = await client.send_message(
                config.phone_number_id,
                config.access_token,
                claimed.body,
                urgent=claimed.priority < Priority.bulk,
                on_sent=on_sent,
            )
        except ThrottlingError as exc:
            self.throttle_count += 1
            self.throttled_until = time.monotonic() + CHANNEL_THROTTLED.delay(self.throttle_count)
            return sends.Retry(claimed, exc.external_error)
        except NotDelivered as exc:
            return sends.Retry(claimed, str(exc))
        except Unconfirmed as exc:
            return sends.Unknown(claimed, str(exc))
        except UpstreamError as exc:
            return sends.Rejected(claimed, exc.external_error)
        self.throttle_count = 0
        return sends.Sent(claimed, result.wamid)

    async def _record_outcomes(self) -> None:
        while True:
            await self.outcome_ready.wait()
            self.outcome_ready.clear()
            try:
                await self._flush_outcomes()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("recording send outcomes of channel %s failed; retrying", self.channel_id)
                self.outcome_ready.set()
                await asyncio.sleep(POLL_SECONDS)

    async def _flush_outcomes(self) -> None:
        batch, self.outcomes = self.outcomes, []
        if not batch:
            return
        grace = self.dispatcher.settings.unconfirmed_send_grace_seconds

        subscriptions = await self.dispatcher.lookups.subscriptions()

        def record(session: Session, outcomes: Sequence[sends.Outcome]) -> int:
            return sends.record_outcomes(
                session, list(outcomes), grace_seconds=grace, subscriptions=subscriptions
            )

        try:
            events, unwritten = await write_isolating(
                self.dispatcher.db, batch, record, sends.park_outcome, first=True
            )
        except BaseException:
            self.outcomes = batch + self.outcomes  # nothing recorded: keep them for the next try
            raise
        kept = {o.send.job_id for o in unwritten}
        self.holding.difference_update(o.send.job_id for o in batch if o.send.job_id not in kept)
        if sum(events):
            self.dispatcher.wake_events()
        if unwritten:
            # Still held (their leases renewed), so no one sends them again meanwhile; tried again.
            self.outcomes = unwritten + self.outcomes
            raise RecordingFailed(f"{len(unwritten)} send outcomes of channel {self.channel_id} not recorded")


class Dispatcher:
    def __init__(
        self,
        *,
        db: Database,
        settings: Settings,
        client: CloudApiClient,
        secret_box: SecretBox,
        lookups: Lookups | None = None,
    ) -> None:
        self.db = db
        # Shared with the API in `serve`, so a template sync or a webhook change here or there applies
        # to both at once.
        self.lookups = lookups or Lookups(db)
        self.settings = settings
        self.client = client
        self.secret_box = secret_box
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        self.ownership = ownership_for(db.url)
        self.lanes: dict[int, ChannelLane] = {}
        self.started_at = time.monotonic()
        self._wake = asyncio.Event()
        self._lanes_needed = True
        self._last_maintenance = 0.0
        self._task: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self.events: EventLane | None = None

    def wake(self, channel_id: int | None = None) -> None:
        lane = self.lanes.get(channel_id) if channel_id is not None else None
        if lane is not None:
            lane.wake()
            return
        if channel_id is not None:
            self._lanes_needed = True
        self._wake.set()

    def wake_events(self) -> None:
        """Events were written here (a status changed): deliver them now."""
        if self.events is not None:
            self.events.wake()

    @property
    def in_flight_lease_seconds(self) -> float:
        """How long a claimed send stays `in_flight`: the call's timeout, then the grace for a webhook."""
        return self.settings.upstream_timeout_seconds + self.settings.unconfirmed_send_grace_seconds

    def reserve_send(self, channel_id: int) -> SendSlot | None:
        """A slot in the lane that will send a new single message as soon as it is stored."""
        lane = self.lanes.get(channel_id)
        return lane.reserve() if lane is not None else None

    def owns(self, channel_id: int) -> bool:
        """Whether this process sends for the channel, so no other needs waking for it."""
        return channel_id in self.lanes

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        self.started_at = time.monotonic()
        self._task = asyncio.create_task(self._run(), name="wagate-dispatcher")
        self.events = EventLane(self)
        if not self.db.is_sqlite:
            self._listener = asyncio.create_task(listen_outbox(self.db.url, self.wake), name="wagate-listen")

    async def stop(self) -> None:
        for task in (self._task, self._listener):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await asyncio.gather(*(lane.stop() for lane in self.lanes.values()), return_exceptions=True)
        self.lanes.clear()
        if self.events is not None:
            await self.events.stop()
            self.events = None
        await self.ownership.close()

    async def _run(self) -> None:
        await self.db.write(
            lambda s: jobs.ensure_periodic_jobs(
                s, template_sync_interval=self.settings.template_sync_interval_seconds
            )
        )
        while True:
            try:
                self._wake.clear()
                busy = await self._tick()
                if not busy:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), timeout=POLL_SECONDS)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dispatcher tick failed; going on")
                await asyncio.sleep(POLL_SECONDS)

    async def _tick(self) -> bool:
        subscriptions = await self.lookups.subscriptions()
        applied, events = await jobs.run_webhook_batch(
            self.db, worker_id=self.worker_id, subscriptions=subscriptions
        )
        if events:
            self.wake_events()
        busy = applied > 0
        maintenance_due = time.monotonic() - self._last_maintenance >= POLL_SECONDS
        if self._lanes_needed or maintenance_due:
            self._lanes_needed = False
            await self._start_lanes()
        if maintenance_due:
            self._last_maintenance = time.monotonic()
            # Sends orphaned by a crash are judged only once this process has listened for Meta's
            # webhooks for a whole grace period: before that, silence proves nothing.
            if time.monotonic() - self.started_at >= self.settings.unconfirmed_send_grace_seconds:
                await self._release_unconfirmed(subscriptions)
            for kind in (JobKind.sync_templates, JobKind.purge_expired):
                for job in await self._claim(kind):
                    await self._run_periodic(job)
        return busy

    async def _release_unconfirmed(self, subscriptions: Subscriptions) -> None:
        """Settle sends whose outcome stayed unknown too long (see sends.release_unconfirmed), except
        those a lane of this process still holds, whatever their lease says; one that cannot be
        settled is parked, not retried every second in front of the others."""
        async with self.db.read() as session:
            expired = await session.run_sync(lambda s: sends.expired_sends(s))
        held = {job for lane in self.lanes.values() for job in lane.holding}
        expired = [job for job in expired if job not in held]
        if not expired:
            return

        def release(session: Session, job_ids: Sequence[int]) -> int:
            return sends.release_unconfirmed(session, job_ids, subscriptions)

        events, _ = await write_isolating(self.db, expired, release, sends.park_release)
        if sum(events):
            self.wake_events()

    async def _claim(self, kind: JobKind) -> list[jobs.ClaimedJob]:
        def claim(session: Session) -> list[jobs.ClaimedJob]:
            return jobs.claim_jobs(session, kind=kind, limit=10, worker_id=self.worker_id)

        return await self.db.write(claim)

    async def _run_periodic(self, job: jobs.ClaimedJob) -> None:
        try:
            await jobs.run_periodic_job(
                self.db,
                job,
                client=self.client,
                secret_box=self.secret_box,
                template_sync_interval=self.settings.template_sync_interval_seconds,
                delivery_retention=timedelta(days=self.settings.delivery_retention_days),
            )
            if job.kind is JobKind.sync_templates:
                self.lookups.forget_templates()
        except Exception as exc:
            log.warning("periodic job %s (%s) failed: %r; will retry", job.id, job.kind, exc)
            error = describe_error(exc)

            def fail(session: Session) -> None:
                jobs.fail_jobs(session, [job], error)

            await self.db.write(fail)

    async def _start_lanes(self) -> None:
        """Own every channel with due sends that no other worker owns, and run a lane for each."""
        async with self.db.read() as session:
            due = await session.scalars(
                select(OutboxJob.channel_id)
                .where(
                    OutboxJob.kind == JobKind.send_message,
                    OutboxJob.state == JobState.ready,
                    OutboxJob.run_at <= utcnow(),
                )
                .distinct()
            )
            due_channels = {c for c in due if c is not None}
        held = await self.ownership.acquire(due_channels)
        for channel_id in held:
            lane = self.lanes.get(channel_id)
            if lane is None:
                self.lanes[channel_id] = ChannelLane(self, channel_id)
            elif channel_id in due_channels:
                lane.wake()
        for channel_id in set(self.lanes) - held:
            await self.lanes.pop(channel_id).stop()
