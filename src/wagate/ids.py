"""Opaque, time-ordered identifiers for messages and batches (`msg_...`, `bat_...`)."""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, rest = divmod(value, 32)
        chars.append(_ALPHABET[rest])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    # 48 bits of milliseconds then 80 random bits (a ULID), so ids sort by creation time in indexes.
    return f"{prefix}_{_encode(time.time_ns() // 1_000_000, 10)}{_encode(secrets.randbits(80), 16)}"
