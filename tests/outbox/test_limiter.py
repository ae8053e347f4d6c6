"""The per-channel limiter: never more than the rate in any window, and close to it when busy."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from support.gateway_process import max_in_window as most_in_window
from wagate.outbox.limiter import SlidingWindowLimiter


def run_until(limiter: SlidingWindowLimiter, start: float, end: float) -> list[float]:
    """Bulk sends as fast as `limiter` allows from `start` to `end`, on a virtual clock; their times."""
    now, sent = start, []
    while now < end:
        allowed = limiter.available(now)
        if allowed:
            limiter.record(allowed, now)
            sent += [now] * allowed
        now += max(limiter.wait_time(now), 0.001)
    return sent


def simulate(rate: int, seconds: float) -> list[float]:
    return run_until(SlidingWindowLimiter(rate), 0.0, seconds)


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


def test_a_send_counts_from_its_answer_by_default() -> None:
    """Meta answers 300 ms after the request left: it may have got it at any moment until then."""
    limiter = SlidingWindowLimiter(10)
    stamp = limiter.record(10, 0.0)
    for _ in range(10):
        limiter.restamp(stamp, written=0.001, now=0.3)
    assert limiter.available(1.299, single=True) == 0
    assert limiter.available(1.301, single=True) == 10


def test_with_a_margin_a_slow_answer_holds_the_slot_only_until_shortly_after_the_write() -> None:
    """The same with a receipt margin: the send counts from its write plus the margin, not from the
    answer, so the channel is not slowed down by Meta's processing time."""
    limiter = SlidingWindowLimiter(10, receipt_margin=0.05)
    stamp = limiter.record(10, 0.0)
    for _ in range(10):
        limiter.restamp(stamp, written=0.001, now=0.3)
    counted_from = 0.001 + limiter.receipt_margin
    assert limiter.available(counted_from + 0.999, single=True) == 0
    assert limiter.available(counted_from + 1.001, single=True) == 10


def test_a_quick_answer_counts_from_the_answer() -> None:
    limiter = SlidingWindowLimiter(10, receipt_margin=0.05)
    stamp = limiter.record(1, 0.0)
    limiter.restamp(stamp, written=0.001, now=0.02)
    assert limiter.wait_time(1.0, single=True) == 0.0
    limiter.record(9, 0.5)
    assert limiter.available(1.01, single=True) == 0  # 0.02 + 1 s
    assert limiter.available(1.021, single=True) == 1


def test_an_answer_after_the_window_still_counts_the_send() -> None:
    """Answered 1.5 s after the decision (whose stamp has left the window), written at 1.2 s."""
    for margin, counted_from in ((None, 1.5), (0.05, 1.25)):
        limiter = SlidingWindowLimiter(1, receipt_margin=margin)
        stamp = limiter.record(1, 0.0)
        assert limiter.available(1.1, single=True) == 1
        limiter.restamp(stamp, written=1.2, now=1.5)
        assert limiter.available(counted_from + 0.99, single=True) == 0
        assert limiter.available(counted_from + 1.01, single=True) == 1


def test_a_request_never_written_counts_from_its_decision() -> None:
    limiter = SlidingWindowLimiter(1)
    stamp = limiter.record(1, 0.0)
    limiter.restamp(stamp, written=None, now=0.5)
    assert limiter.available(0.9, single=True) == 0
    assert limiter.available(1.01, single=True) == 1
