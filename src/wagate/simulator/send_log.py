"""The simulator's log of accepted sends: one record per send, the ids and clock stamps it is made with,
and the count of sends in a window (the rate limit's, and the stats')."""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

RATE_WINDOW_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class SentRecord:
    """One accepted send request, as the simulator saw it."""

    received_at: float  # wall clock, Unix seconds
    received_monotonic: float
    phone_number_id: str
    waba_id: str
    to: str | None  # the number as sent in "to", or the customer's number for a send by user id
    recipient: str | None  # the BSUID sent in "recipient" (None for a send to a number)
    user_id: str  # the customer's business-scoped user id
    type: str
    # The request's JSON as it came, parsed only when read (`to_json`): a parsed body is a tree of
    # dozens of objects that the collector's full passes walk, and the simulator keeps every send of
    # a run (100,000 objects after a few thousand sends, passes of about 90 ms that held up the
    # receipt stamps the tests measure by); bytes are not walked.
    body_json: bytes
    biz_opaque_callback_data: str | None
    wamid: str
    template_name: str | None
    template_language: str | None
    template_category: str | None
    # The connection fault the answer to this accepted send met (``reset_after``, ``hang_after``...):
    # the client never learnt that it was accepted. None when answered as usual.
    answer_fault: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__slots__ if name != "body_json"}
        data["body"] = orjson.loads(self.body_json)
        data["received_at_iso"] = (
            datetime.fromtimestamp(self.received_at, UTC).isoformat().replace("+00:00", "Z")
        )
        return data


def max_in_window(times: list[float], window: float = RATE_WINDOW_SECONDS) -> int:
    """Most events in any half-open window [t, t + window) (two pointers over sorted times)."""
    ordered = sorted(times)
    best = 0
    start = 0
    for end, t in enumerate(ordered):
        while t - ordered[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


def new_wamid(wa_id: str) -> str:
    """A unique id in the look of Meta's (``wamid.`` + base64 that embeds the recipient)."""
    raw = f"{wa_id}:{uuid.uuid4().hex}".encode()
    return "wamid." + base64.b64encode(raw).decode("ascii")


def now_pair() -> tuple[float, float]:
    return time.time(), time.monotonic()
