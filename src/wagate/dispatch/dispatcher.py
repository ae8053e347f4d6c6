"""The dispatcher: drains the outbox. Sends go through one paced lane per channel; the rest are jobs.

It runs inside `wagate serve` or alone as `wagate worker`. The API wakes it after each commit (and on
PostgreSQL other processes' commits wake it by NOTIFY), so a send starts at once; a one-second poll is
only the fallback, for rows that are due later. The rows of dead dispatchers and the sends left
unconfirmed are released by its `Releases` (releases.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from datetime import timedelta
from functools import partial
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from wagate.core.cache import Caches
from wagate.core.config import Settings
from wagate.core.db import Database, utcnow
from wagate.core.security import SecretBox
from wagate.dispatch import jobs, webhook_jobs
from wagate.dispatch.deps import LaneDeps
from wagate.dispatch.event_lane import EventLane
from wagate.dispatch.releases import Releases
from wagate.dispatch.send_lane import ChannelLane
from wagate.events.subscriptions import Subscriptions, current_subscriptions
from wagate.messages.meta_updates import WebhooksApplied
from wagate.observability.metrics import ChannelRate, Metrics
from wagate.outbox.errors import describe_error
from wagate.outbox.fast_claims import SendRooms
from wagate.outbox.isolation import log_failure
from wagate.outbox.models import JobKind, JobState, OutboxJob
from wagate.outbox.notify import listen_outbox
from wagate.outbox.ownership import WORKER_ID, ownership_for
from wagate.templates.service import forget_templates
from wagate.whatsapp.client import CloudApiClient

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
# Bodies handed over and not yet applied, at most: two batches (see `Dispatcher.hand_over`).
RECEIVED_MAX = 2 * webhook_jobs.WEBHOOK_BATCH


class Dispatcher(Releases):
    def __init__(
        self,
        *,
        db: Database,
        settings: Settings,
        client: CloudApiClient,
        secret_box: SecretBox,
        caches: Caches | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.db = db
        # Shared with the API in `serve`, so a template sync or a webhook change here or there applies
        # to both at once.
        self.caches = caches or Caches(db)
        self.settings = settings
        self.client = client
        self.secret_box = secret_box
        self.worker_id = WORKER_ID
        self.metrics = metrics or Metrics()
        self.deps = LaneDeps(db, settings, client, secret_box, self.caches, self.worker_id, self.metrics)
        self.ownership = ownership_for(db.url)
        self.lanes: dict[int, ChannelLane] = {}
        # The same lanes, for the API's fast path of a single send (outbox/fast_claims.py).
        self.rooms = SendRooms()
        # The dispatchers alive at the last look (PostgreSQL; None: not looked yet).
        self._live_sessions: set[str] | None = None
        self.started_at = time.monotonic()
        self._wake = asyncio.Event()
        self._lanes_needed = True
        self._last_maintenance = 0.0
        # Meta webhook bodies claimed when the database went away, applied first when it is back.
        self._held_webhooks: list[jobs.ClaimedJob] = []
        # Bodies the receiver stored for this process's channels, applied without a claim (see
        # `hand_over`); `_claim_webhooks`: whether the next tick must claim stored bodies anyway.
        self._received: deque[webhook_jobs.ReceivedBody] = deque()
        self._claim_webhooks = True
        self._task: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self.events: EventLane | None = None

    def wake(self, channel_id: int | None = None) -> None:
        lane = self.lanes.get(channel_id) if channel_id is not None else None
        if lane is not None:
            lane.wake()
            return
        if channel_id is not None:
            if self.ownership.held_elsewhere(channel_id):
                # Its owner heard the same NOTIFY. Asking for the channel again on every send another
                # process accepts would cost each worker a round of queries per message (a webhook
                # claim, the due channels, a lock try); a takeover is found by the next maintenance
                # round instead, within POLL_SECONDS.
                return
            self._lanes_needed = True
        self._wake.set()

    def wake_webhooks(self, channel_id: int | None) -> None:
        """Meta's webhook bodies were stored for the channel (None: for no one channel): apply them now
        if they are this process's to apply (see `_tick`)."""
        if channel_id is not None and channel_id not in self.lanes:
            if self.ownership.held_elsewhere(channel_id):
                return  # its owner heard the same NOTIFY
            self._lanes_needed = True  # nobody may send for it yet: take it, and its bodies with it
        self._claim_webhooks = True
        self._wake.set()

    def hand_over(self, job_id: int, channel_id: int | None, body: dict[str, Any]) -> None:
        """The receiver stored this body for one of this process's channels (committed), due for a
        claim only a few seconds on (`HANDED_OVER_SECONDS`): the next tick applies it as it is,
        without claiming its row (`webhook_jobs.apply_received`). A claim that takes the row first applies
        it instead."""
        self._received.append(webhook_jobs.ReceivedBody(job_id, channel_id, body))
        self._wake.set()

    def hand_over_room(self) -> bool:
        """Whether the receiver may hand over one more body (at most `RECEIVED_MAX` wait here; past
        them, bodies are stored due at once and claimed)."""
        return self.running and len(self._received) < RECEIVED_MAX

    def _heard(self, channel_id: int | None, webhook: bool) -> None:
        """A NOTIFY from another process (outbox/notify.py)."""
        if webhook:
            self.wake_webhooks(channel_id)
        else:
            self.wake(channel_id)

    async def apply_webhook(self, body: dict[str, Any]) -> bool:
        """Apply a Meta webhook body about one of this process's channels as it is received, in a unit
        of work of its own before the 200 (bodies that come together share a batch), rather than store
        it for `_tick` to claim, apply and delete: one write a body instead of three. False when it
        could not be applied; the caller then stores it, and `_tick` takes it with its retries and
        dead letters, as any stored body."""
        subscriptions = await current_subscriptions(self.caches)
        try:
            applied = await self.db.write(
                webhook_jobs.apply_on_receipt(body, subscriptions, self.settings.price_list)
            )
        except Exception as exc:
            log.warning(
                "a Meta webhook could not be applied on receipt, so it is stored: %s", describe_error(exc)
            )
            return False
        self._count_applied(applied)
        return True

    def wake_events(self) -> None:
        """Events were written here (a status changed): deliver them now."""
        if self.events is not None:
            self.events.wake()

    def owns(self, channel_id: int) -> bool:
        """Whether this process sends for the channel, so no other needs waking for it."""
        return channel_id in self.lanes

    def channel_rates(self) -> list[ChannelRate]:
        """Each channel this process paces: its sends in the last second against its limit (metrics)."""
        return [
            ChannelRate(
                str(channel_id), lane.limiter.rate - lane.limiter.available(single=True), lane.limiter.rate
            )
            for channel_id, lane in self.lanes.items()
        ]

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        self.started_at = time.monotonic()
        self._task = asyncio.create_task(self._run(), name="wagate-dispatcher")
        self.events = EventLane(self.deps)
        if not self.db.is_sqlite:
            listener = listen_outbox(self.db.url, self._heard)
            self._listener = asyncio.create_task(listener, name="wagate-listen")

    async def stop(self) -> None:
        for task in (self._task, self._listener):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await asyncio.gather(*(lane.stop() for lane in self.lanes.values()), return_exceptions=True)
        self.lanes.clear()
        self.rooms.clear()
        self._received.clear()  # their rows are stored and unclaimed: the channels' next owner claims them
        if self.events is not None:
            await self.events.stop()
            self.events = None
        await self.ownership.close()

    async def _run(self) -> None:
        # The locks' session first: from then on other dispatchers see this one alive, before it claims.
        await self.ownership.live_sessions()
        periodic_ensured = False
        while True:
            try:
                if not periodic_ensured:
                    # In the loop: a failure here (the database not up yet) is tried again, not the
                    # silent end of the dispatcher while the process lives on.
                    await self.db.write(
                        lambda s: jobs.ensure_periodic_jobs(
                            s, template_sync_interval=self.settings.template_sync_interval_seconds
                        )
                    )
                    periodic_ensured = True
                self._wake.clear()
                busy = await self._tick()
                if not busy:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), timeout=POLL_SECONDS)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log_failure(log, "dispatcher tick failed; going on", exc)
                await asyncio.sleep(POLL_SECONDS)

    async def _tick(self) -> bool:
        started = utcnow()  # stored webhooks from before now are applied below, if they can be
        subscriptions = await current_subscriptions(self.caches)
        maintenance_due = time.monotonic() - self._last_maintenance >= POLL_SECONDS
        busy = False
        if self._received:
            busy = await self._apply_received(subscriptions)
        # Stored bodies are claimed when something asked for it (a body stored and not handed over,
        # another process's NOTIFY, a full batch, a failed apply, a channel taken over) and once a
        # maintenance round (bodies whose retry came due); never on the chance, after every body
        # handed over: that claim would take the rows the next tick applies without one.
        if self._claim_webhooks or maintenance_due:
            self._claim_webhooks = False
            busy = await self._claim_and_apply(subscriptions) or busy
        if self._lanes_needed or maintenance_due:
            self._lanes_needed = False
            await self._start_lanes()
        if maintenance_due:
            self._last_maintenance = time.monotonic()
            await self._release_dead_owners()
            await self._release_unconfirmed(subscriptions, webhooks_before=started)
            for kind in (JobKind.sync_templates, JobKind.purge_expired):
                for job in await self._claim(kind):
                    await self._run_periodic(job)
        return busy

    async def _apply_received(self, subscriptions: Subscriptions) -> bool:
        """Apply the bodies handed over (a batch at most); True when more wait."""
        taken = [
            self._received.popleft() for _ in range(min(len(self._received), webhook_jobs.WEBHOOK_BATCH))
        ]
        # A channel taken by another process since (its lock's connection lost) is its to apply: the
        # row stays for that process's claim.
        mine = [
            item
            for item in taken
            if self.ownership.sole or item.channel_id is None or item.channel_id in self.lanes
        ]
        applied = await webhook_jobs.apply_received(self.db, mine, subscriptions, self.settings.price_list)
        if applied is None:
            self._claim_webhooks = True
            return True
        self._count_applied(applied)
        return bool(self._received)

    async def _claim_and_apply(self, subscriptions: Subscriptions) -> bool:
        """Claim stored bodies and apply them; True when a full batch may have left some behind."""
        batch = await webhook_jobs.run_webhook_batch(
            self.db,
            worker_id=self.worker_id,
            # Only the bodies of the channels this process sends for (and those of no one channel):
            # another process's status updates would wait on, and deadlock with, their owner's writes
            # to the same messages rows (the scale-out test: 1 s stalls, PostgreSQL's deadlock_timeout).
            channels=None if self.ownership.sole else set(self.lanes),
            subscriptions=subscriptions,
            prices=self.settings.price_list,
            held=self._held_webhooks,
        )
        self._held_webhooks = batch.held
        self._count_applied(batch)
        # Only a full batch may have left bodies behind. One stored meanwhile woke `_wake` (cleared
        # before this tick), so the next tick comes at once anyway; claiming again on the chance would
        # cost an empty claim, a transaction, after every body a low rate brings one at a time.
        full = batch.taken >= webhook_jobs.WEBHOOK_BATCH and not batch.held
        if full or batch.held:  # (never cleared here: a body stored meanwhile asked for a claim too)
            self._claim_webhooks = True
        return full

    def _count_applied(self, applied: webhook_jobs.WebhookBatch | WebhooksApplied) -> None:
        if applied.statuses:
            self.metrics.statuses_applied.inc(applied.statuses)
        if applied.events:
            self.wake_events()
        if applied.templates:
            # Meta changed a template (paused, recategorised...): this process's sends see it at once,
            # other processes' when their cache's few seconds run out (wagate.core.cache).
            forget_templates(self.caches)

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
                forget_templates(self.caches)
        except Exception as exc:
            log.warning("periodic job %s (%s) failed: %r; will retry", job.id, job.kind, exc)
            error = describe_error(exc)

            def fail(session: Session) -> None:
                jobs.fail_jobs(session, [job], error)

            await self.db.write(fail)

    async def _start_lanes(self) -> None:
        """Own every channel with due sends or stored webhook bodies that no other worker owns, and run
        a lane for each."""
        async with self.db.read() as session:
            due = await session.scalars(
                select(OutboxJob.channel_id)
                .where(
                    OutboxJob.kind.in_((JobKind.send_message, JobKind.meta_webhook)),
                    OutboxJob.state == JobState.ready,
                    OutboxJob.run_at <= utcnow(),
                )
                .distinct()
            )
            due_channels = {c for c in due if c is not None}
        held = await self.ownership.acquire(due_channels)
        taken = held - set(self.lanes)
        if taken and not self.ownership.sole:
            await self.db.write(
                partial(webhook_jobs.take_over_webhooks, channel_ids=taken, worker_id=self.worker_id),
                first=True,
            )
            self._claim_webhooks = True  # their bodies, from now on this process's to apply
        for channel_id in held:
            lane = self.lanes.get(channel_id)
            if lane is None:
                lane = self.lanes[channel_id] = ChannelLane(self.deps, channel_id, self.wake_events)
                self.rooms.add(channel_id, lane)
                if self.ownership.taken_over(channel_id):
                    # Another process sent for it until moments ago; its last second is not in our
                    # limiter (outbox/ownership.py).
                    lane.limiter.hold_window()
            elif channel_id in due_channels:
                lane.wake()
        for channel_id in set(self.lanes) - held:
            self.rooms.remove(channel_id)
            await self.lanes.pop(channel_id).stop()
