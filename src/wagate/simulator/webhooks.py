"""Signed webhook delivery with retries, and the status walk of each accepted message.

Each accepted message gets one task that walks through its statuses in order: a status is only
handed on after the previous one was delivered, so retries never reorder them (unless reordering was
asked for). Statuses of different messages of one WABA that become due within
``webhook_batch_window_seconds`` of each other go out in ONE POST (:mod:`wagate.simulator.batching`),
as Meta batches them. A receiver that is down gets the webhook later, as Meta retries for days;
here the total is ``webhook_retry_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp

from wagate.simulator.batching import StatusBatcher
from wagate.simulator.config import ChannelInfo
from wagate.simulator.payloads import Recipient, StatusUpdate, error_item, status_update, statuses_payload
from wagate.simulator.state import SimulatorState


def meta_signature(app_secret: str, raw_body: bytes) -> str:
    """`X-Hub-Signature-256` as Meta sends it: `sha256=` and the hex HMAC-SHA256 of the raw body,
    keyed with the app secret. Written here again on purpose: the simulator shares no code with the
    gateway, so a mistake in the receiver's check cannot hide behind the same mistake here."""
    return "sha256=" + hmac.new(app_secret.encode("utf-8"), raw_body, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class StatusStep:
    delay: float
    status: str
    error: tuple[int, str, str] | None = None  # (code, title, details) for a failed status


class WebhookSender:
    """Owns the aiohttp session and every pending webhook task of one simulator app."""

    def __init__(self, state: SimulatorState) -> None:
        self.state = state
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.batcher = StatusBatcher(self)

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100))
        return self._session

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel_all(self) -> None:
        self.batcher.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    async def close(self) -> None:
        await self.cancel_all()
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def wait_idle(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        # Tasks may spawn new ones (a failed first attempt continues in the background): loop.
        while self._tasks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await asyncio.wait(set(self._tasks), timeout=remaining)
        return not self._tasks

    async def post_once(self, payload: dict[str, Any]) -> int | None:
        """One attempt; the HTTP status, or None when nothing answered (or no URL is set yet)."""
        url = self.state.config.webhook_url
        if not url:
            return None
        # Meta escapes non-ASCII in its JSON; the signature is over exactly these bytes.
        raw = json.dumps(payload, separators=(",", ":")).encode("ascii")
        headers = {
            "Content-Type": "application/json",
            "X-Hub-Signature-256": meta_signature(self.state.config.app_secret, raw),
        }
        timeout = aiohttp.ClientTimeout(total=self.state.config.webhook_timeout)
        try:
            async with self._get_session().post(url, data=raw, headers=headers, timeout=timeout) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None

    async def deliver(self, payload: dict[str, Any], *, first_attempt_done: bool = False) -> bool:
        """Deliver with exponential backoff until a 2xx or ``webhook_retry_total`` runs out."""
        config = self.state.config
        deadline = time.monotonic() + config.webhook_retry_total
        delay = config.webhook_retry_initial
        attempt_needed = not first_attempt_done
        while True:
            if attempt_needed:
                status = await self.post_once(payload)
                if status is not None and 200 <= status < 300:
                    self.state.counters.delivered += 1
                    return True
                self.state.counters.failed_attempts += 1
            attempt_needed = True
            if time.monotonic() + delay > deadline:
                self.state.counters.gave_up += 1
                return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, config.webhook_retry_cap)

    async def burst(
        self, updates: list[StatusUpdate], *, copies: int, per_post: int, concurrency: int
    ) -> tuple[int, int, int]:
        """Post ``updates`` again, ``copies`` times, ``per_post`` statuses to a body, ``concurrency``
        bodies at once, each with the usual retries; (bodies, delivered, given up)."""
        bodies = [
            statuses_payload(updates[start : start + per_post])
            for _ in range(copies)
            for start in range(0, len(updates), per_post)
        ]
        gate = asyncio.Semaphore(concurrency)

        async def one(payload: dict[str, Any]) -> bool:
            async with gate:
                return await self.deliver(payload)

        results = await asyncio.gather(*(one(body) for body in bodies))
        delivered = sum(1 for ok in results if ok)
        return len(bodies), delivered, len(bodies) - delivered

    async def deliver_now(self, payload: dict[str, Any]) -> bool:
        """Try once right away (control endpoints report the result); keep retrying in the background."""
        status = await self.post_once(payload)
        if status is not None and 200 <= status < 300:
            self.state.counters.delivered += 1
            return True
        self.state.counters.failed_attempts += 1
        self.spawn(self._deliver_later(payload))
        return False

    async def _deliver_later(self, payload: dict[str, Any]) -> None:
        await self.deliver(payload, first_attempt_done=True)

    def schedule_statuses(
        self,
        channel: ChannelInfo,
        steps: list[StatusStep],
        *,
        wamid: str,
        recipient: Recipient,
        biz_opaque_callback_data: str | None,
        pricing_category: str | None,
        billable: bool | None = None,
        release: asyncio.Future[None] | None = None,
    ) -> None:
        """Send the statuses of an accepted send at their delays; those of a held send (template
        pacing) only once `release` is done, at their delays from then."""
        config = self.state.config
        ordered = steps
        if config.reorder_statuses:
            # Keep the timing slots and put the statuses into them backwards (read before sent).
            ordered = [
                StatusStep(slot.delay, s.status, s.error) for slot, s in zip(steps, steps[::-1], strict=True)
            ]
        copies = self.state.status_copies()
        started = time.monotonic()

        async def run() -> None:
            nonlocal started
            if release is not None:
                await release
                started = time.monotonic()
            for step in ordered:
                wait = started + step.delay - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                # Built when due, so a username set in between shows on the later statuses.
                update = status_update(
                    channel,
                    recipient,
                    wamid=wamid,
                    status=step.status,
                    biz_opaque_callback_data=biz_opaque_callback_data,
                    pricing_category=pricing_category,
                    billable=billable,
                    errors=[error_item(*step.error)] if step.error else None,
                )
                self.state.statuses_sent.append(update)
                for _ in range(copies):
                    # The next status waits until this one was delivered (or given up on).
                    await self.batcher.submit(update)

        self.spawn(run())
