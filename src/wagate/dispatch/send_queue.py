"""A send lane's queue: the sends it claimed ahead of their moment (a claim runs beside the lane's
rounds), the trade of bulk rows for waiting single sends, the rows given back, and the leases of
every row the lane holds. `ChannelLane` (send_lane.py) is a `LaneQueue`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from functools import partial

from sqlalchemy.orm import Session

from wagate.dispatch import send_claims
from wagate.dispatch.deps import LaneDeps
from wagate.outbox.isolation import log_failure
from wagate.outbox.limiter import SlidingWindowLimiter
from wagate.outbox.models import ClaimedSend, Priority

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
MAX_CLAIM = 500  # sends claimed at once
# Rows for the coming half second are claimed ahead (at most MAX_CLAIM), again whenever fewer than
# half of that wait: a claim that waits behind a busy writer or a slow commit then costs no sends.
# Not more: after a crash, rows claimed but never sent wait out their lease like sent ones.
CLAIM_AHEAD_SECONDS = 0.5


class LaneQueue:
    """The claim ahead and the queue of a `ChannelLane`, which sets these in its `__init__`."""

    deps: LaneDeps
    channel_id: int
    limiter: SlidingWindowLimiter
    wake_event: asyncio.Event
    giving_back: set[asyncio.Task[None]]
    claimed: deque[ClaimedSend]
    holding: set[int]
    claiming: asyncio.Task[None] | None
    claim_seconds: float
    drained_at: float

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
            await self.deps.db.write(lambda session: send_claims.unclaim(session, unsent))
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
            return send_claims.claim_sends(
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
            await self.deps.db.write(lambda session: send_claims.unclaim(session, job_ids), first=True)
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
                    partial(send_claims.renew_leases, job_ids=held, worker_id=worker_id, lease_seconds=lease),
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
