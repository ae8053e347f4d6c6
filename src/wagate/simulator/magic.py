"""Magic recipient numbers: a send to one of these triggers a fault, like real numbers sometimes do.

The match is on the last seven digits of ``to``, so any country code works; the constants below are
Azerbaijani mobile numbers (+994 50 ...) that the ``phonenumbers`` library considers valid, so the
gateway accepts them and the fault happens upstream, where it would in production.

=================  =============================  =====================================================
last 7 digits      constant                       what the simulator does
=================  =============================  =====================================================
``0001026``        ``MAGIC_UNDELIVERABLE``        200, then a ``failed`` status with 131026
                                                  "Message undeliverable"
``0001047``        ``MAGIC_REENGAGEMENT``         200, then a ``failed`` status with 131047
                                                  "Re-engagement message" (24-hour window closed)
``0130429``        ``MAGIC_RATE_LIMITED``         HTTP 400 with error code 130429 "Rate limit hit";
                                                  nothing is sent
``0000500``        ``MAGIC_SERVER_ERROR``         HTTP 500 (code 131000); nothing is sent
``0000408``        ``MAGIC_SLOW``                 the message IS accepted and its status webhooks
                                                  follow, but the 200 comes only after
                                                  ``slow_response_seconds`` (default 30 s), longer
                                                  than any client timeout: a lost reply
``0000104``        ``MAGIC_RESET``                the connection is reset (TCP RST) before the send is
                                                  recorded: it never reached Meta, but the client
                                                  cannot tell (no answer at all)
``0001104``        ``MAGIC_RESET_AFTER_ACCEPT``   the send is recorded and its statuses follow, then
                                                  the connection is reset instead of the 200
``0000110``        ``MAGIC_HANG``                 no answer and nothing recorded; the connection is
                                                  closed once the client gives up (or after
                                                  ``slow_response_seconds``)
``0000202``        ``MAGIC_SENT_ONLY``            200, then ``sent`` and never ``delivered``
``0000410``        ``MAGIC_FAILED_THEN_DELIVERED``  200, then ``sent``, ``failed`` (131026), and a late
                                                  ``delivered`` (Meta does this for multi-device users)
=================  =============================  =====================================================
"""

from __future__ import annotations

from enum import StrEnum


class Fault(StrEnum):
    UNDELIVERABLE = "undeliverable"
    REENGAGEMENT = "reengagement"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    SLOW = "slow"
    RESET = "reset"
    RESET_AFTER_ACCEPT = "reset_after_accept"
    HANG = "hang"
    SENT_ONLY = "sent_only"
    FAILED_THEN_DELIVERED = "failed_then_delivered"


MAGIC_UNDELIVERABLE = "+994500001026"
MAGIC_REENGAGEMENT = "+994500001047"
MAGIC_RATE_LIMITED = "+994500130429"
MAGIC_SERVER_ERROR = "+994500000500"
MAGIC_SLOW = "+994500000408"
MAGIC_RESET = "+994500000104"
MAGIC_RESET_AFTER_ACCEPT = "+994500001104"
MAGIC_HANG = "+994500000110"
MAGIC_SENT_ONLY = "+994500000202"
MAGIC_FAILED_THEN_DELIVERED = "+994500000410"

MAGIC_NUMBERS: dict[str, Fault] = {
    MAGIC_UNDELIVERABLE: Fault.UNDELIVERABLE,
    MAGIC_REENGAGEMENT: Fault.REENGAGEMENT,
    MAGIC_RATE_LIMITED: Fault.RATE_LIMITED,
    MAGIC_SERVER_ERROR: Fault.SERVER_ERROR,
    MAGIC_SLOW: Fault.SLOW,
    MAGIC_RESET: Fault.RESET,
    MAGIC_RESET_AFTER_ACCEPT: Fault.RESET_AFTER_ACCEPT,
    MAGIC_HANG: Fault.HANG,
    MAGIC_SENT_ONLY: Fault.SENT_ONLY,
    MAGIC_FAILED_THEN_DELIVERED: Fault.FAILED_THEN_DELIVERED,
}

_SUFFIX_LENGTH = 7
_BY_SUFFIX: dict[str, Fault] = {number[-_SUFFIX_LENGTH:]: fault for number, fault in MAGIC_NUMBERS.items()}

# (code, title, details) Meta puts into a failed status for each failing fault.
FAILURE_ERRORS: dict[Fault, tuple[int, str, str]] = {
    Fault.UNDELIVERABLE: (131026, "Message undeliverable", "Message Undeliverable."),
    Fault.FAILED_THEN_DELIVERED: (131026, "Message undeliverable", "Message Undeliverable."),
    Fault.REENGAGEMENT: (
        131047,
        "Re-engagement message",
        "Message failed to send because more than 24 hours have passed since the customer last "
        "replied to this number.",
    ),
}


def fault_for(to: str) -> Fault | None:
    """The fault a recipient triggers, judged by the last seven digits of the number."""
    digits = "".join(ch for ch in to if ch.isdigit())
    if len(digits) < _SUFFIX_LENGTH:
        return None
    return _BY_SUFFIX.get(digits[-_SUFFIX_LENGTH:])
