"""The dispatcher's event lane: delivers account webhook events and status_callback reports.

Like a channel's send lane, each HTTP call is a task of its own and the attempts are recorded in
batches, so a receiver that takes its full 10 s holds up nothing but its own event. It claims when
woken (events were written, a delivery finished) and otherwise sleeps until the next delivery or
`after_seconds` report is due, or a second at most (for rows other processes wrote).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from functools import partial

import orjson
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from wagate.core.db import utcnow
from wagate.dispatch.deps import LaneDeps
from wagate.events import deliveries, delivery_claims
from wagate.events.http import DELIVERY_TIMEOUT_SECONDS, EventPoster
from wagate.events.signing import signed_headers
from wagate.messages import events as message_events
from wagate.outbox.errors import describe_error
from wagate.outbox.isolation import log_failure, write_isolating
from wagate.outbox.models import JobKind, OutboxJob
from wagate.outbox.recorder import BatchRecorder
from wagate.outbox.retry import EVENT_DELIVERY

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
MAX_IN_FLIGHT = 256
# However many accounts have calls under way, each may have at least this many: an account whose
# endpoints hang for their full 10 s gets its share of the lane, never the whole of it.
MIN_ACCOUNT_SHARE = 8
REPORT_CHECK_SECONDS = 0.2


class EventLane:
    def __init__(self, deps: LaneDeps) -> None:
        settings = deps.settings
        self.db = deps.db
        self.secret_box = deps.secret_box
        self.worker_id = deps.worker_id
        self.metrics = deps.metrics
        self.poster = EventPoster(allow_private=settings.allow_private_urls, pool_limit=MAX_IN_FLIGHT)
        self.retry = replace(EVENT_DELIVERY, base_delay=settings.event_retry_base_seconds)
        # A claimed delivery whose process died is sent again after this (WAGATE_EVENT_LEASE_SECONDS).
        self.lease_seconds = settings.event_lease_seconds
        self.disable = deliveries.DisablePolicy(
            settings.webhook_disable_after_failures, settings.webhook_disable_after_seconds
        )
        self.calls: set[asyncio.Task[None]] = set()
        self.busy: Counter[int | None] = Counter()  # calls under way, per account
        self._reports_checked_at = 0.0
        self.wake_event = asyncio.Event()
        self.stopping = False
        self._secrets: dict[str, str] = {}
        self.task = asyncio.create_task(self._run(), name="wagate-events")
        self.recorder = BatchRecorder("event deliveries", self._record)

    def wake(self) -> None:
        self.wake_event.set()

    async def stop(self) -> None:
        self.stopping = True
        self.wake()
        await asyncio.wait({self.task}, timeout=2.0)
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        if self.calls:
            await asyncio.wait(self.calls, timeout=DELIVERY_TIMEOUT_SECONDS + 1)
        await self.recorder.close()
        try:
            released = await self.db.write(partial(delivery_claims.release_claims, worker_id=self.worker_id))
            if released:
                log.info("gave back %d event deliveries claimed and not posted", released)
        except Exception as exc:  # the database is away: they are posted again after their lease
            log.warning("could not give back claimed event deliveries: %s", describe_error(exc))
        await self.poster.close()

    async def _run(self) -> None:
        while not self.stopping:
            try:
                self.wake_event.clear()
                if not await self._round():
                    # Asked first: when the database is away it raises, and a wait made before it would
                    # be left unawaited.
                    idle = await self._idle_seconds()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.wake_event.wait(), timeout=idle)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log_failure(log, "event lane failed a round; going on", exc)
                await asyncio.sleep(POLL_SECONDS)

    async def _round(self) -> bool:
        while len(self.calls) >= MAX_IN_FLIGHT:
            await asyncio.wait(self.calls, return_when=asyncio.FIRST_COMPLETED)
        limit = MAX_IN_FLIGHT - len(self.calls)
        await self._render_due_reports()

        fair = delivery_claims.FairShare(self._share(), Counter(self.busy))

        def claim(session: Session) -> list[delivery_claims.ClaimedDelivery]:
            return delivery_claims.claim_deliveries(
                session, limit=limit, worker_id=self.worker_id, lease_seconds=self.lease_seconds, fair=fair
            )

        claimed = await self.db.write(claim)
        # Started before anything else is awaited: a stop that cancels the round then leaves no claim
        # without its call.
        for delivery in claimed:
            if delivery.url is not None:
                self.busy[delivery.account_id] += 1
                call = asyncio.create_task(self._post(delivery))
                self.calls.add(call)
                call.add_done_callback(self.calls.discard)
        unsendable = [d for d in claimed if d.url is None]
        if unsendable:
            await self.db.write(lambda session: deliveries.drop_undeliverable(session, unsendable))
        return bool(claimed)

    def _share(self) -> int:
        """The lane's calls split evenly between the accounts that have some under way and one more,
        and never more than half of them, so an account whose events come next always finds room;
        never below MIN_ACCOUNT_SHARE."""
        active = sum(1 for calls in self.busy.values() if calls > 0)
        return max(MIN_ACCOUNT_SHARE, min(MAX_IN_FLIGHT // 2, MAX_IN_FLIGHT // (active + 1)))

    async def _render_due_reports(self) -> None:
        """`after_seconds` reports that are due become deliveries; one that cannot is parked.

        Looked for a few times a second, not on every round: a report is due at a whole number of
        seconds after its message, and a fraction of a second later is on time."""
        if time.monotonic() - self._reports_checked_at < REPORT_CHECK_SECONDS:
            return
        self._reports_checked_at = time.monotonic()
        async with self.db.read() as session:
            due = await session.run_sync(lambda s: message_events.due_reports(s))
        if due:
            await write_isolating(self.db, due, message_events.render_reports, deliveries.park_report)

    async def _idle_seconds(self) -> float:
        """Until the next delivery or report is due, within the poll interval."""
        now = utcnow()
        async with self.db.read() as session:
            next_due = await session.scalar(
                select(func.min(OutboxJob.run_at)).where(
                    OutboxJob.kind.in_([JobKind.deliver_event, JobKind.status_report]),
                    OutboxJob.run_at > now,
                )
            )
        if next_due is None:
            return POLL_SECONDS
        return min(POLL_SECONDS, max(0.0, (next_due - now) / timedelta(seconds=1)))

    async def _post(self, delivery: delivery_claims.ClaimedDelivery) -> None:
        assert delivery.url is not None
        try:
            body = orjson.dumps(delivery.body)
            at = utcnow()
            headers = signed_headers(
                self._secret(delivery.secret_encrypted),
                event_id=delivery.id,
                timestamp=at,
                body=body.decode(),
            )
            result = await self.poster.post(delivery.url, body, headers)
        finally:
            self.busy[delivery.account_id] -= 1
            if self.busy[delivery.account_id] <= 0:
                del self.busy[delivery.account_id]
        self.recorder.add(deliveries.Attempted(delivery, at, result))
        self.metrics.event_deliveries.labels("delivered" if result.succeeded else "failed").inc()

    def _secret(self, encrypted: str | None) -> str | None:
        if not encrypted:
            return None  # a status_callback without a secret is sent unsigned
        secret = self._secrets.get(encrypted)
        if secret is None:
            if len(self._secrets) > 10_000:
                self._secrets.clear()
            secret = self._secrets[encrypted] = self.secret_box.decrypt(encrypted)
        return secret

    async def _record(self, batch: list[deliveries.Attempted]) -> list[deliveries.Attempted]:
        """Store a round of attempts (one that cannot be is parked, see isolation.py); returns those
        that must wait for the next try."""

        def record(session: Session, attempts: Sequence[deliveries.Attempted]) -> None:
            deliveries.record_attempts(session, list(attempts), retry=self.retry, disable=self.disable)

        _, unwritten = await write_isolating(self.db, batch, record, deliveries.park_attempt)
        self.wake()  # the next event of each finished one's message may go now
        return unwritten
