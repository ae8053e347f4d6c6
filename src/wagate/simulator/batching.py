"""Several statuses in one POST: statuses of one WABA that become due close together share a body.

The first status handed in opens a batch for its WABA and a flush ``webhook_batch_window_seconds``
later; statuses handed in meanwhile join it (at most ``MAX_BATCH``, then it goes at once). The
flush builds one body (a change per channel, ``contacts[]`` and ``statuses[]`` in order) and
delivers it with the usual retries; every status of the batch learns the outcome together, so each
message's walk moves on to its next status only after this one was delivered. With a window of 0
each status is a POST of its own, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from wagate.simulator.payloads import StatusUpdate, statuses_payload
from wagate.simulator.state import SimulatorState

MAX_BATCH = 100


class Delivery(Protocol):
    state: SimulatorState

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None: ...

    async def deliver(self, payload: dict[str, Any], *, first_attempt_done: bool = False) -> bool: ...


@dataclass
class _Batch:
    updates: list[StatusUpdate] = field(default_factory=list)
    waiters: list[asyncio.Future[bool]] = field(default_factory=list)
    closed: bool = False


class StatusBatcher:
    """Open batches per WABA; lives on the simulator's loop like the rest of its state."""

    def __init__(self, delivery: Delivery) -> None:
        self._delivery = delivery
        self._open: dict[str, _Batch] = {}

    def clear(self) -> None:
        """Drop the open batches (a reset cancels their flushes and waiters anyway)."""
        self._open.clear()

    async def submit(self, update: StatusUpdate) -> bool:
        """Hand one status in; True once the body carrying it was delivered, False if given up."""
        window = self._delivery.state.config.webhook_batch_window_seconds
        if window <= 0:
            return await self._delivery.deliver(statuses_payload([update]))
        waba_id = update.channel.waba_id
        batch = self._open.get(waba_id)
        if batch is None:
            batch = self._open[waba_id] = _Batch()
            self._delivery.spawn(self._flush_after(waba_id, batch, window))
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        batch.updates.append(update)
        batch.waiters.append(waiter)
        if len(batch.updates) >= MAX_BATCH:
            self._close(waba_id, batch)
            self._delivery.spawn(self._flush(batch))
        return await waiter

    def _close(self, waba_id: str, batch: _Batch) -> None:
        batch.closed = True
        if self._open.get(waba_id) is batch:
            del self._open[waba_id]

    async def _flush_after(self, waba_id: str, batch: _Batch, window: float) -> None:
        await asyncio.sleep(window)
        if batch.closed:
            return  # already gone out when it filled up
        self._close(waba_id, batch)
        await self._flush(batch)

    async def _flush(self, batch: _Batch) -> None:
        delivered = await self._delivery.deliver(statuses_payload(batch.updates))
        for waiter in batch.waiters:
            if not waiter.done():
                waiter.set_result(delivered)
