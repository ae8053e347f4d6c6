"""The message status machine: sent < delivered < read, failed final, each status once in history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from wagate.core.db import isoformat, utcnow
from wagate.messages.models import EXTERNAL_ERROR_LENGTH, Message, MessageRecord, MessageStatus
from wagate.messages.schemas import message_view

_RANK = {MessageStatus.sent: 1, MessageStatus.delivered: 2, MessageStatus.read: 3}


@dataclass(frozen=True)
class StatusChange:
    message_id: str
    previous: MessageStatus
    current: MessageStatus
    account_id: int
    conversation_id: int
    # The message object of API.md section 5 as it was right after this change (what its events
    # carry, even when several changes land in one transaction); the conversation's status is
    # filled in when the events are written.
    view: dict[str, Any]
    status_callback: dict[str, Any] | None
    # Sent through the API (or bulk, or an agent): its changes are events. The replies of Meta's AI
    # agent (`sent_by`) move only on the dashboard.
    announced: bool = True


def can_move(current: MessageStatus, new: MessageStatus) -> bool:
    if current is MessageStatus.failed:
        return False  # final: Meta may still send `delivered` for another device of the user
    if new is MessageStatus.failed:
        return current is not MessageStatus.read
    return _RANK[new] > _RANK[current]


def apply_status(
    message: Message | MessageRecord,
    new: MessageStatus,
    *,
    at: datetime | None = None,
    external_error: str | None = None,
) -> StatusChange | None:
    """Move the message forward to `new`; None when the status is old news (duplicate or out of order)."""
    if not can_move(message.status, new):
        return None
    previous = message.status
    stamp = isoformat(at or utcnow()) or ""
    # Meta's timestamps have whole seconds, so `delivered` may read earlier than our own `sent`;
    # history keeps time moving forward. (ISO strings of one format compare like the times.)
    last = message.status_history[-1]["at"] if message.status_history else ""
    message.status = new
    message.status_history = [*message.status_history, {"status": new.value, "at": max(stamp, last)}]
    if new is MessageStatus.failed:
        # Meta's error titles have no limit of their own: the column's is the one that holds.
        message.external_error = external_error[:EXTERNAL_ERROR_LENGTH] if external_error else None
    message.updated_at = utcnow()
    return StatusChange(
        message.id,
        previous,
        new,
        account_id=message.account_id,
        conversation_id=message.conversation_id,
        view=message_view(message, conversation_status=""),
        status_callback=message.status_callback,
        announced=message.sent_by is None,
    )
