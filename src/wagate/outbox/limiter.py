"""Per-channel pacing: never more than the channel's messages per second in any one-second window."""

from __future__ import annotations

import bisect
import math
import time


class SlidingWindowLimiter:
    """A sliding log of send times for the promise, and a token bucket for the pace.

    The log is the promise to Meta: never more than `rate` sends in any second as Meta counts them, by
    the moment each request reaches it. That moment lies between the write of the request and Meta's
    answer, so a send is logged when it is decided and moved, once answered (`restamp`), to its answer
    or to `RECEIPT_MARGIN` after its write, whichever is earlier: the margin covers the way there and
    its jitter, and the rest of a slow answer (Meta's own processing, a few hundred milliseconds) does
    not hold the slot, which would cost the channel that share of its rate.

    The bucket fills at `rate` per `PACE` seconds (a little slower than the promise, which leaves room
    for that delay) and is drawn a twentieth of that at a time, so a channel at 80/s sends 4 every
    50 ms instead of 80 at once and then waiting, with one claim per slice. It holds up to
    `BURST_SLICES` slices: a round that comes late takes what accrued meanwhile, instead of losing the
    slices it missed.

    Single sends (OTPs) answer only to the promise: they may go whenever the window has room, and the
    tokens they take are owed by the bulk sends that follow (down to `-burst`), so a batch neither
    delays an OTP nor, counted over its run, goes faster because of one.

    The log knows only this process's sends. A channel taken over from another process (see
    outbox/ownership.py) starts with `hold_window`: nothing goes for one window and `TAKEOVER_SLACK`,
    so the previous owner's last second of sends, unknown here, is out of Meta's window first.
    """

    # The log is a list kept in time order: a send's stamp is found by bisection, where a deque's
    # `remove` compared it with every older stamp (up to `rate` of them, twice per send: 4 % of the
    # CPU of a send at 1000/s; docs/performance.md, "A message alone").
    SLICES = 20
    BURST_SLICES = 5
    PACE = 1.01
    # The last requests the previous owner wrote may still be on their way to Meta when it is gone.
    TAKEOVER_SLACK = 0.1

    def __init__(self, rate: int, *, window: float = 1.0, receipt_margin: float | None = None) -> None:
        self.window = window
        self.receipt_margin = receipt_margin
        self._sent: list[float] = []
        self.set_rate(rate)
        self._tokens = float(self.slice_rate)
        self._filled_at: float | None = None
        self._held_until = 0.0

    def set_rate(self, rate: int) -> None:
        self.rate = max(1, rate)
        self.slice_rate = max(1, math.ceil(self.rate / self.SLICES))
        self.burst = self.BURST_SLICES * self.slice_rate

    def _update(self, now: float) -> None:
        if self._sent and self._sent[0] <= now - self.window:
            del self._sent[: bisect.bisect_right(self._sent, now - self.window)]
        if self._filled_at is None or now > self._filled_at:
            if self._filled_at is not None:
                accrued = (now - self._filled_at) * self.rate / self.PACE
                self._tokens = min(self.burst, self._tokens + accrued)
            self._filled_at = now

    def hold_window(self, now: float | None = None) -> None:
        """Send nothing for a window (and `TAKEOVER_SLACK`) from now: another process sent for the
        channel until moments ago, and its sends are not in this log."""
        now = time.monotonic() if now is None else now
        self._held_until = max(self._held_until, now + self.window + self.TAKEOVER_SLACK)

    def available(self, now: float | None = None, *, single: bool = False) -> int:
        """How many sends may start now: bulk ones need tokens, single ones only room in the window."""
        now = time.monotonic() if now is None else now
        self._update(now)
        if now < self._held_until:
            return 0
        room = self.rate - len(self._sent)
        return max(0, room if single else min(room, math.floor(self._tokens)))

    def wait_time(self, now: float | None = None, *, single: bool = False) -> float:
        """Seconds until a slice's worth of sends (or what the window still has room for) may go;
        for a single send, until the window has room for one."""
        now = time.monotonic() if now is None else now
        self._update(now)
        waits = [self._held_until - now] if now < self._held_until else []
        if len(self._sent) >= self.rate:
            waits.append(self._sent[-self.rate] + self.window - now)
        if not single and self._tokens < self.slice_rate:
            waits.append((self.slice_rate - self._tokens) * self.PACE / self.rate)
        return max(0.0, max(waits)) + 1e-4 if waits else 0.0

    def record(self, count: int, now: float | None = None) -> float:
        """Log `count` sends decided now; returns their stamp (for `restamp`)."""
        now = time.monotonic() if now is None else now
        self._update(now)
        self._tokens = max(-self.burst, self._tokens - count)
        self._sent.extend([now] * count)
        return now

    def restamp(self, stamp: float, written: float | None, now: float | None = None) -> None:
        """A send logged at `stamp` was answered now; `written`: when its request was written (None:
        it never was, and the decision stays its moment)."""
        now = time.monotonic() if now is None else now
        self._forget(stamp)  # not there: already out of the window
        if written is None:  # nothing reached Meta
            received_by = stamp
        elif self.receipt_margin is None:
            received_by = now
        else:
            received_by = min(now, written + self.receipt_margin)
        if received_by > now - self.window:
            bisect.insort(self._sent, received_by)  # later sends may be logged before it: keep the order

    def _forget(self, stamp: float) -> None:
        """Take one send logged at `stamp` out of the log, if it is still there."""
        index = bisect.bisect_left(self._sent, stamp)
        if index < len(self._sent) and self._sent[index] == stamp:
            del self._sent[index]

    def reserve(self) -> float | None:
        """Hold a slot for a single send while it is being stored: its stamp, or None when the
        window is full."""
        stamp = time.monotonic()
        if self.available(stamp, single=True) < 1:
            return None
        return self.record(1, stamp)

    def settle(self, hold: float) -> float:
        """The held slot's send starts now, and counts from now; returns its stamp (for `restamp`)."""
        now = time.monotonic()
        self._update(now)
        self._forget(hold)  # not there: the hold is already out of the window
        self._sent.append(now)  # the latest stamp: the log stays in order
        return now
