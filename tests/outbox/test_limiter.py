"""The per-channel limiter: never more than the rate in any window, and close to it when busy."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from wagate.outbox.limiter import SlidingWindowLimiter


def simulate(rate: int, seconds: float) -> list[float]:
    """Send as fast as the limiter allows on a virtual clock; returns the send times."""
    limiter = SlidingWindowLimiter(rate)
    now, sent = 0.0, []
    while now < seconds:
        allowed = limiter.available(now)
        if allowed:
            limiter.record(allowed, now)
            sent += [now] * allowed
        now += max(limiter.wait_time(now), 0.001)
    return sent


def most_in_window(times: list[float], window: float = 1.0) -> int:
    best, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=1, max_value=1000))
def test_never_more_than_the_rate_in_any_second(rate: int) -> None:
    sent = simulate(rate, 3.0)
    assert most_in_window(sent) <= rate
    # Busy, it uses at least 98% of the allowance (a window of 1.01 s leaves 1%).
    assert len([t for t in sent if 1.0 <= t < 3.0]) >= 0.98 * 2 * rate - rate / 20 - 1


def test_sends_are_spread_over_the_second() -> None:
    sent = simulate(80, 1.0)
    assert most_in_window(sent, window=0.05) <= 4


def test_a_single_send_needs_only_room_in_the_window() -> None:
    limiter = SlidingWindowLimiter(100)
    limiter.record(limiter.available(0.0), 0.0)  # a busy batch took every token there was
    assert limiter.available(0.0) == 0
    assert limiter.available(0.0, single=True) == 95
    assert limiter.wait_time(0.0, single=True) == 0.0
    assert limiter.wait_time(0.0) > 0.0


def test_single_sends_are_paid_for_by_the_bulk_sends_after_them() -> None:
    """OTPs during a batch do not make the channel as a whole go faster than its pace."""
    limiter = SlidingWindowLimiter(100)  # 5 per slice
    limiter.record(limiter.available(0.0), 0.0)
    limiter.record(3, 0.0)  # three OTPs on credit
    # The bulk sends wait for the three tokens owed and then a slice's worth: 8 at 100 per 1.01 s.
    assert abs(limiter.wait_time(0.0) - 8 * 1.01 / 100) < 1e-3
    assert limiter.available(0.0 + 8 * 1.01 / 100 + 1e-3) == 5


def test_a_full_window_holds_single_sends_too() -> None:
    limiter = SlidingWindowLimiter(10)
    for moment in range(10):
        limiter.record(1, moment * 0.01)
    assert limiter.available(0.5, single=True) == 0
    # The first of them leaves the window at 1.0 s.
    assert 0.49 < limiter.wait_time(0.5, single=True) <= 0.51
