"""The fast path of a single send, below the domains: room in a channel's lane, taken by the API.

Each channel this process sends for has a lane (wagate.dispatch.send_lane's `ChannelLane`), which is
a `SendRoom` and registers in the process's `SendRooms`. The API asks the registry for room
(`prepare_claim`: a slot of the channel's window held while the send is stored already claimed) and,
once the row is committed, hands the send over with `FastClaim.started`: its call to Meta starts as a
task of its own, the lane's `_call`, which the event loop runs. So the API never calls up into the
dispatcher; the task is the hand-over, with no wake-up of the lane and no claim between
(docs/decisions/0005-request-path.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, Protocol

from wagate.core.db import utcnow
from wagate.outbox.limiter import SlidingWindowLimiter
from wagate.outbox.models import ClaimedSend, FastClaim


class LaneConfig(Protocol):
    paused: bool  # Meta refuses the channel: only a probe send goes


class SendRoom:
    """What of a channel's lane the fast path reads and starts: a `ChannelLane` sets these in its
    `__init__` and keeps them (its config, whether it stops, until when Meta throttles it, its calls
    under way and the rows it holds)."""

    worker_id: str
    lease_seconds: float
    limiter: SlidingWindowLimiter
    config: LaneConfig | None
    stopping: bool
    throttled_until: float
    calls: set[asyncio.Task[None]]
    holding: set[int]

    @property
    def max_in_flight(self) -> int:
        return max(16, 2 * self.limiter.rate)

    def _call(self, config: Any, claimed: ClaimedSend, stamp: float) -> Coroutine[Any, Any, None]:
        """The call to Meta for a claimed send and the record of its outcome (the lane's)."""
        raise NotImplementedError

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
        locked_until = utcnow() + timedelta(seconds=self.lease_seconds)

        def started(claimed: ClaimedSend) -> None:
            self.send_now(claimed, self.limiter.settle(hold))

        return FastClaim(self.worker_id, locked_until, started)

    def send_now(self, claimed: ClaimedSend, stamp: float) -> None:
        """Call Meta for a claimed send whose slot the limiter logged at `stamp`: a task of its own."""
        if self.config is None:  # cannot happen once a round or reserve() ran
            return
        self.holding.add(claimed.job_id)
        call = asyncio.create_task(self._call(self.config, claimed, stamp))
        self.calls.add(call)
        call.add_done_callback(self.calls.discard)


class SendRooms:
    """The lanes of this process by channel, as the API's fast path sees them (the dispatcher adds
    and removes them with its lanes)."""

    def __init__(self) -> None:
        self._rooms: dict[int, SendRoom] = {}

    def add(self, channel_id: int, room: SendRoom) -> None:
        self._rooms[channel_id] = room

    def remove(self, channel_id: int) -> None:
        self._rooms.pop(channel_id, None)

    def clear(self) -> None:
        self._rooms.clear()

    def prepare_claim(self, channel_id: int) -> FastClaim | None:
        """Room for a new single send in its channel's lane right now (see `FastClaim`), or None: then
        it is stored ready, and the dispatcher's `wake` after the commit hands it to whichever process
        owns the channel."""
        room = self._rooms.get(channel_id)
        return room.prepare_claim() if room is not None else None

    def owns(self, channel_id: int) -> bool:
        """Whether this process sends for the channel, so no other needs waking for it."""
        return channel_id in self._rooms
