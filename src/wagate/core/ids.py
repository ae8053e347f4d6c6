"""Opaque, time-ordered identifiers for messages and batches (`msg_...`, `bat_...`)."""

from __future__ import annotations

import secrets
import threading
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
_RANDOM_BITS = 80

# The last id's time and random part: ids made in one millisecond by this process follow each other
# (a monotonic ULID), so a thread's messages stored together (several in one Meta POST) keep the order
# they were stored in, and the page orders by id within a second.
_last = (0, 0)
_lock = threading.Lock()


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, rest = divmod(value, 32)
        chars.append(_ALPHABET[rest])
    return "".join(reversed(chars))


def _next() -> tuple[int, int]:
    global _last
    millis = time.time_ns() // 1_000_000
    with _lock:
        last_millis, last_random = _last
        if millis <= last_millis and last_random + 1 < 1 << _RANDOM_BITS:
            # Same millisecond (or the clock stepped back): one more than the last, never before it.
            millis, random_part = last_millis, last_random + 1
        else:
            random_part = secrets.randbits(_RANDOM_BITS)
        _last = (millis, random_part)
    return millis, random_part


def new_id(prefix: str) -> str:
    # 48 bits of milliseconds then 80 random bits (a ULID), so ids sort by creation time in indexes.
    millis, random_part = _next()
    return f"{prefix}_{_encode(millis, 10)}{_encode(random_part, 16)}"
