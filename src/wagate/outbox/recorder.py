"""What the lanes' calls did, stored in batches by a task of its own.

A lane starts each upstream call or delivery as a task, so one slow answer holds up nothing but
itself; the results are written together as they come, one unit of work per batch. A batch that
could not be written (the database out of reach, see isolation.py) is kept and tried again after a
pause: nothing is lost, and the calls behind it are not held up either.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from wagate.outbox.isolation import log_failure

log = logging.getLogger(__name__)

PAUSE_SECONDS = 1.0
Result = TypeVar("Result")


class NotWritten(Exception):
    """Some results could not be written yet: the recorder tries them again after a pause."""


class BatchRecorder(Generic[Result]):
    def __init__(self, name: str, write: Callable[[list[Result]], Awaitable[list[Result]]]) -> None:
        """`write` stores a batch and returns what it could not store (kept for the next try)."""
        self.name = name
        self.pending: list[Result] = []
        self._write = write
        self._ready = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"wagate-record-{name}")

    def add(self, result: Result) -> None:
        self.pending.append(result)
        self._ready.set()

    async def flush(self) -> None:
        """Write what is pending now; raises NotWritten if some of it has to wait for the next try."""
        batch, self.pending = self.pending, []
        if not batch:
            return
        try:
            unwritten = await self._write(batch)
        except BaseException:
            self.pending = batch + self.pending  # nothing written: all of it for the next try
            raise
        if unwritten:
            self.pending = unwritten + self.pending
            raise NotWritten(f"{len(unwritten)} results of {self.name} not written yet")

    async def close(self) -> None:
        """Stop the task and write what is left, once."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self.flush()

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except NotWritten as exc:  # the write said why (the database out of reach) already
                log.warning("%s; trying again", exc)
                self._ready.set()
                await asyncio.sleep(PAUSE_SECONDS)
            except Exception as exc:
                log_failure(log, "recording the results of %s failed; trying again", exc, self.name)
                self._ready.set()
                await asyncio.sleep(PAUSE_SECONDS)
