"""The dispatcher: drains the outbox. Sends go through one paced lane per channel; the rest are jobs.

It runs inside `wagate serve` or alone as `wagate worker`. The API wakes it after each commit, so a
send starts at once; a one-second poll is only the fallback (delayed rows, other processes' writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from wagate.channels.models import Channel
from wagate.config import Settings
from wagate.db import Database, utcnow
from wagate.outbox import jobs, sends
from wagate.outbox.leases import acquire_channel_leases
from wagate.outbox.limiter import SlidingWindowLimiter
from wagate.outbox.models import JobKind, JobState, OutboxJob
from wagate.outbox.notify import listen_outbox
from wagate.outbox.retry import CHANNEL_THROTTLED
from wagate.security import SecretBox
from wagate.whatsapp.client import CloudApiClient
from wagate.whatsapp.errors import NotDelivered, ThrottlingError, Unconfirmed, UpstreamError

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
LEASE_SECONDS = 30.0
MAX_CLAIM = 100  # sends claimed per round; the limiter usually allows fewer


@dataclass
class ChannelConfig:
    phone_number_id: str
    access_token: str
    messages_per_second: int


class ChannelLane:
    """Sends one channel's messages in order of priority, never faster than its limit."""

    def __init__(self, dispatcher: Dispatcher, channel_id: int) -> None:
        self.dispatcher = dispatcher
        self.channel_id = channel_id
        self.limiter = SlidingWindowLimiter(80)
        self.config: ChannelConfig | None = None
        self.config_loaded_at = 0.0
        self.wake_event = asyncio.Event()
        self.throttled_until = 0.0
        self.throttle_count = 0
        self.task = asyncio.create_task(self._run(), name=f"wagate-lane-{channel_id}")

    def wake(self) -> None:
        self.wake_event.set()

    async def _load_config(self) -> ChannelConfig | None:
        if self.config is None or time.monotonic() - self.config_loaded_at > 60:
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
        while True:
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
        """Send what is due and allowed now; False when there was nothing to send."""
        pause = self.throttled_until - time.monotonic()
        if pause > 0:
            await asyncio.sleep(pause)
        config = await self._load_config()
        if config is None:
            return False
        wait = self.limiter.wait_time()
        if wait > 0:
            await asyncio.sleep(wait)
        allowed = min(self.limiter.available(), MAX_CLAIM)
        db = self.dispatcher.db
        settings = self.dispatcher.settings
        grace = settings.unconfirmed_send_grace_seconds
        # In flight for at most the call's timeout; then the grace period for Meta's webhook.
        lease = settings.upstream_timeout_seconds + grace

        async def claim(session: AsyncSession) -> list[sends.ClaimedSend]:
            return await sends.claim_sends(
                session,
                channel_id=self.channel_id,
                limit=allowed,
                worker_id=self.dispatcher.worker_id,
                lease_seconds=lease,
            )

        claimed = await db.write(claim)
        if not claimed:
            return False
        self.limiter.record(len(claimed))
        outcomes = list(await asyncio.gather(*(self._send(config, c) for c in claimed)))

        async def record(session: AsyncSession) -> None:
            await sends.record_outcomes(session, outcomes, grace_seconds=grace)

        await db.write(record)
        return True

    async def _send(self, config: ChannelConfig, claimed: sends.ClaimedSend) -> sends.Outcome:
        client = self.dispatcher.client
        try:
            result = await client.send_message(config.phone_number_id, config.access_token, claimed.body)
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


class Dispatcher:
    def __init__(
        self, *, db: Database, settings: Settings, client: CloudApiClient, secret_box: SecretBox
    ) -> None:
        self.db = db
        self.settings = settings
        self.client = client
        self.secret_box = secret_box
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        self.lanes: dict[int, ChannelLane] = {}
        self.owned_channels: set[int] = set()
        self._wake = asyncio.Event()
        self._lanes_needed = True
        self._last_maintenance = 0.0
        self._task: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None

    def wake(self, channel_id: int | None = None) -> None:
        lane = self.lanes.get(channel_id) if channel_id is not None else None
        if lane is not None:
            lane.wake()
            return
        if channel_id is not None:
            self._lanes_needed = True
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="wagate-dispatcher")
        if not self.db.is_sqlite:
            self._listener = asyncio.create_task(listen_outbox(self.db.url, self.wake), name="wagate-listen")

    async def stop(self) -> None:
        tasks = [lane.task for lane in self.lanes.values()]
        tasks += [t for t in (self._task, self._listener) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.lanes.clear()

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
        busy = await jobs.run_webhook_batch(self.db, worker_id=self.worker_id) > 0
        maintenance_due = time.monotonic() - self._last_maintenance >= POLL_SECONDS
        if self._lanes_needed or maintenance_due:
            self._lanes_needed = False
            await self._start_lanes()
        if maintenance_due:
            self._last_maintenance = time.monotonic()
            await self.db.write(sends.release_unconfirmed)
            for kind in (JobKind.sync_templates, JobKind.purge_expired):
                for job in await self._claim(kind):
                    await self._run_periodic(job)
        return busy

    async def _claim(self, kind: JobKind) -> list[jobs.ClaimedJob]:
        async def claim(session: AsyncSession) -> list[jobs.ClaimedJob]:
            return await jobs.claim_jobs(session, kind=kind, limit=10, worker_id=self.worker_id)

        return await self.db.write(claim)

    async def _run_periodic(self, job: jobs.ClaimedJob) -> None:
        try:
            await jobs.run_periodic_job(
                self.db,
                job,
                client=self.client,
                secret_box=self.secret_box,
                template_sync_interval=self.settings.template_sync_interval_seconds,
            )
        except Exception as exc:
            log.warning("periodic job %s (%s) failed: %r; will retry", job.id, job.kind, exc)
            error = repr(exc)

            async def fail(session: AsyncSession) -> None:
                await jobs.fail_jobs(session, [job], error)

            await self.db.write(fail)

    async def _start_lanes(self) -> None:
        """Own (by lease) every channel with due sends, and run a lane for each owned channel."""
        async with self.db.read() as session:
            due_channels = set(
                await session.scalars(
                    select(OutboxJob.channel_id)
                    .where(
                        OutboxJob.kind == JobKind.send_message,
                        OutboxJob.state == JobState.ready,
                        OutboxJob.run_at <= utcnow(),
                    )
                    .distinct()
                )
            )
        wanted = {c for c in due_channels if c is not None} | self.owned_channels
        if not wanted:
            return
        self.owned_channels = await self.db.write(
            lambda s: acquire_channel_leases(
                s, channel_ids=wanted, owner=self.worker_id, ttl=timedelta(seconds=LEASE_SECONDS)
            )
        )
        for channel_id in self.owned_channels:
            lane = self.lanes.get(channel_id)
            if lane is None:
                self.lanes[channel_id] = ChannelLane(self, channel_id)
            elif channel_id in due_channels:
                lane.wake()
        for channel_id in set(self.lanes) - self.owned_channels:
            self.lanes.pop(channel_id).task.cancel()
