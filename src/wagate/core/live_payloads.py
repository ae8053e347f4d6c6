"""The payloads of the NOTIFY that tells other processes of live changes: a round of changes encoded
into notifications under PostgreSQL's size limit, and read back."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from wagate.core.live import LiveChange, LiveKind

log = logging.getLogger(__name__)
# PostgreSQL refuses a NOTIFY payload of 8000 bytes or more; a round of changes is split below that.
PAYLOAD_LIMIT = 7900


# The wire format of a notification: `<origin>|<change>;<change>...`, each change
# `account,channel,conversation,kind,conversation status,message id` with one letter for the kind
# (`i` an inbound message) and the usual statuses. Message ids are ours (`msg_` and base32).
_KIND_CODES: dict[tuple[str, bool], str] = {
    (LiveKind.message, False): "m",
    (LiveKind.message, True): "i",
    (LiveKind.status, False): "s",
    (LiveKind.status, True): "S",
    (LiveKind.conversation, False): "c",
    (LiveKind.conversation, True): "C",
}
_KINDS = {code: (LiveKind(kind), inbound) for (kind, inbound), code in _KIND_CODES.items()}
_STATUS_CODES = {"open": "o", "pending": "p", "resolved": "r"}
_STATUSES = {code: status for status, code in _STATUS_CODES.items()}


def _encode(change: LiveChange) -> str | None:
    kind = _KIND_CODES.get((change.kind, change.inbound))
    status = change.conversation_status or ""
    status = _STATUS_CODES.get(status, status)
    entry = (
        f"{change.account_id},{change.channel_id},{change.conversation_id},{kind},{status},"
        f"{change.message_id or ''}"
    )
    if kind is None or "|" in entry or ";" in entry or entry.count(",") != 5:
        return None
    return entry


def encode_changes(origin: str, changes: Sequence[LiveChange], limit: int = PAYLOAD_LIMIT) -> list[str]:
    """The payloads of NOTIFY for `changes`, in order, each under `limit` bytes."""
    head = f"{origin}|"
    payloads: list[str] = []
    entries: list[str] = []
    size = len(head)
    for change in changes:
        if change.kind == LiveKind.reset:
            continue  # a listener's own business, never sent
        entry = _encode(change)
        if entry is None:
            log.warning("a live change that cannot be sent: %r", change)
            continue
        cost = len(entry.encode()) + 1
        if entries and size + cost > limit:
            payloads.append(head + ";".join(entries))
            entries, size = [], len(head)
        entries.append(entry)
        size += cost
    if entries:
        payloads.append(head + ";".join(entries))
    return payloads


def decode_changes(payload: str) -> tuple[str, list[LiveChange]]:
    """(origin, changes) of a payload made by `encode_changes`; ValueError when it is not one."""
    origin, bar, body = payload.partition("|")
    if not bar:
        raise ValueError("no origin")
    changes = []
    for entry in body.split(";"):
        account, channel, conversation, code, status, message_id = entry.split(",")
        if code not in _KINDS:
            raise ValueError(f"unknown kind {code!r}")
        kind, inbound = _KINDS[code]
        changes.append(
            LiveChange(
                int(account),
                int(channel),
                int(conversation),
                kind,
                inbound=inbound,
                conversation_status=_STATUSES.get(status, status) or None,
                message_id=message_id or None,
            )
        )
    return origin, changes
