"""Group commit: the queue of units of work waiting for a writer, taken in batches that share one
commit (wagate.core.db's `Database` keeps one per writer connection)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from wagate.core.units import UnitOfWork

T = TypeVar("T")


@dataclass
class _PendingUnit:
    unit: UnitOfWork[Any]
    future: asyncio.Future[Any]


@dataclass
class GroupCommitter:
    """Runs queued units of work in batches, one transaction and one commit per batch.

    Units submitted `first` (the dispatcher's claims and results) go into the next batch ahead of
    the others, so sending never queues behind a crowd of API writes.

    `split_above`: when more units than this wait, a batch takes half of them (at least this many),
    and the rest start the next batch as soon as it is done. The event loop then answers and reads
    one half's requests while the other half's batch waits on the database, instead of idling through
    one batch of every request in flight (docs/decisions/0002-postgresql-writer.md).
    """

    run_batch: Callable[[list[UnitOfWork[Any]]], Awaitable[list[tuple[bool, Any]]]]
    max_batch: int = 256
    split_above: int | None = None
    urgent: deque[_PendingUnit] = field(default_factory=deque)
    normal: deque[_PendingUnit] = field(default_factory=deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def submit(self, unit: UnitOfWork[T], *, first: bool) -> T:
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run(), name="wagate-group-commit")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        (self.urgent if first else self.normal).append(_PendingUnit(unit, future))
        self.ready.set()
        return await future

    def _take_batch(self) -> list[_PendingUnit]:
        batch: list[_PendingUnit] = []
        size = self.max_batch
        waiting = len(self.urgent) + len(self.normal)
        if self.split_above is not None and waiting > self.split_above:
            size = min(size, max(self.split_above, (waiting + 1) // 2))
        for queue in (self.urgent, self.normal):
            while queue and len(batch) < size:
                batch.append(queue.popleft())
        return batch

    async def _run(self) -> None:
        while True:
            await self.ready.wait()
            self.ready.clear()
            while batch := self._take_batch():
                try:
                    results = await self.run_batch([p.unit for p in batch])
                except Exception as exc:  # the commit itself failed: nothing of the batch is stored
                    results = [(False, exc)] * len(batch)
                for pending, (ok, value) in zip(batch, results, strict=True):
                    if pending.future.done():
                        continue
                    if ok:
                        pending.future.set_result(value)
                    else:
                        pending.future.set_exception(value)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
