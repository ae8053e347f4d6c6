"""Per-channel pacing: never more than the channel's messages per second in any one-second window."""

from __future__ import annotations

import math
import time
from collections import deque


class SlidingWindowLimiter:
    """Two sliding logs of send times: one for the second, one for a twentieth of it.

    The second-long window is the promise to Meta. The short one spreads a second's sends evenly,
    so a channel at 80/s sends 4 every 50 ms instead of 80 at once and then waiting. The window is
    a little longer than a second, so that network jitter on the way cannot put one send too many
    into a second as Meta (or the simulator) counts it.
    """

    SLICES = 20

    def __init__(self, rate: int, *, window: float = 1.01) -> None:
        self.rate = max(1, rate)
        self.window = window
        self.slice_window = window / self.SLICES
        self.slice_rate = max(1, math.ceil(self.rate / self.SLICES))
        self._sent: deque[float] = deque()

    def _trim(self, now: float) -> None:
        while self._sent and self._sent[0] <= now - self.window:
            self._sent.popleft()

    def available(self, now: float | None = None) -> int:
        now = time.monotonic() if now is None else now
        self._trim(now)
        in_slice = sum(1 for t in reversed(self._sent) if t > now - self.slice_window)
        return max(0, min(self.rate - len(self._sent), self.slice_rate - in_slice))

    def wait_time(self, now: float | None = None) -> float:
        """Seconds until at least one send is allowed."""
        now = time.monotonic() if now is None else now
        if self.available(now) > 0:
            return 0.0
        waits = []
        if len(self._sent) >= self.rate:
            waits.append(self._sent[-self.rate] + self.window - now)
        recent = [t for t in self._sent if t > now - self.slice_window]
        if len(recent) >= self.slice_rate:
            waits.append(recent[-self.slice_rate] + self.slice_window - now)
        return max(0.0, max(waits, default=0.0)) + 1e-4

    def record(self, count: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._sent.extend([now] * count)

    def reserve(self, count: int) -> float:
        """Hold `count` slots while the sends are being prepared; returns the hold's stamp."""
        stamp = time.monotonic()
        self._sent.extend([stamp] * count)
        return stamp

    def settle(self, stamp: float, reserved: int, used: int) -> None:
        """Turn a hold into the sends that really start now: the window counts from when they leave."""
        for _ in range(reserved):
            try:
                self._sent.remove(stamp)
            except ValueError:  # already out of the window
                break
        self.record(used)

    def set_rate(self, rate: int) -> None:
        self.rate = max(1, rate)
        self.slice_rate = max(1, math.ceil(self.rate / self.SLICES))
