"""The failures tests inject into the next sends: a Meta error (``fail_next``) or a broken connection
(``fault_next``), each for a number of sends, narrowed to one recipient or number if asked."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass
class InjectedFailure:
    """``fail_next``: the next ``count`` matching sends fail with ``code``.

    ``to`` / ``phone_number_id`` narrow it to one recipient or number, so a send of another test
    still in flight cannot use the failure up.
    """

    count: int
    code: int
    to: str | None = None  # digits, no '+', or a user id
    phone_number_id: str | None = None

    def matches(self, phone_number_id: str, recipients: tuple[str, ...]) -> bool:
        return (self.to is None or self.to in recipients) and (
            self.phone_number_id is None or self.phone_number_id == phone_number_id
        )


class ConnectionFault(StrEnum):
    """``fault_next`` kinds: the connection itself fails, as networks and Meta's front ends do.

    ``*_before``: the send is never recorded (it did not reach Meta: no log entry, no status webhook).
    ``*_after``: it is recorded and its status webhooks follow; only the answer is lost.
    """

    RESET_BEFORE = "reset_before"  # RST (SO_LINGER 0) instead of an answer; nothing recorded
    RESET_AFTER = "reset_after"  # recorded, then RST instead of the answer
    CLOSE_BEFORE = "close_before"  # an orderly close (FIN) without an answer; nothing recorded
    CLOSE_AFTER = "close_after"  # recorded, then FIN without the answer
    HANG_BEFORE = "hang_before"  # no answer until the client gives up (then closed); nothing recorded
    HANG_AFTER = "hang_after"  # recorded, the answer only after slow_response_seconds (fail_next 408)

    @property
    def reaches_meta(self) -> bool:
        return self.value.endswith("_after")


@dataclass
class InjectedFault:
    """``fault_next``: the next ``count`` matching sends meet the connection fault ``kind``."""

    count: int
    kind: ConnectionFault
    to: str | None = None  # digits, no '+', or a user id
    phone_number_id: str | None = None

    def matches(self, phone_number_id: str, recipients: tuple[str, ...]) -> bool:
        return (self.to is None or self.to in recipients) and (
            self.phone_number_id is None or self.phone_number_id == phone_number_id
        )
