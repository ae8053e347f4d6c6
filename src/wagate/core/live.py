"""Live changes for the dashboard: what just changed in an account (a new message, a message's status,
a conversation's status), told to the pages that show it once the transaction that made it commits.

- A unit of work records changes with `record_live(session, changes)`, beside the events it writes.
  They wait in the session's info (`wagate.core.units.COMMIT_NOTES`); the database gives the changes of the
  units that committed to its commit listeners, which `LiveHub` is; a unit rolled back (alone, in its
  savepoint, or with its whole batch) takes its changes with it.
- The hub hands them to this process's subscribers (`LiveHub.subscribe`). On PostgreSQL it also tells
  the other processes: NOTIFY on `wagate_live`, after the commit and from a connection of its own, one
  statement per round of commits, never inside a send's transaction (a NOTIFY there serializes the
  commits: docs/performance.md). Every serving process LISTENs on that channel (`start`) and hands
  what the others committed to its own subscribers; its own changes it delivered already
  (`wagate.core.live_hub`, the notifications' format in `wagate.core.live_payloads`).
- A subscriber that falls behind loses its queue and gets one `reset` change instead, as it does when
  the LISTEN connection was lost: changes may have been missed, so the page reloads what it shows
  (`wagate.core.live_feed`).

This module holds what a change is and how a unit of work records one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy.orm import Session

from wagate.core.units import COMMIT_NOTES


class LiveKind(StrEnum):
    message = "message"  # a new message, either direction
    status = "status"  # a message's status moved
    conversation = "conversation"  # a conversation's status changed
    reset = "reset"  # changes may have been missed: reload (only ever delivered, never recorded)


@dataclass(frozen=True, slots=True)
class LiveChange:
    account_id: int
    channel_id: int
    conversation_id: int
    kind: str  # a LiveKind
    inbound: bool = False  # a customer's message
    conversation_status: str | None = None  # the conversation's status after the change, when known
    message_id: str | None = None


def record_live(session: Session, changes: Iterable[LiveChange]) -> None:
    """Inside a unit of work: `changes` are published once its transaction commits, never if it rolls
    back. Costs an append per change: this runs in every send's unit."""
    notes: list[Any] | None = session.info.get(COMMIT_NOTES)
    if notes is None:
        notes = session.info[COMMIT_NOTES] = []
    notes.extend(changes)


def reset_for(account_id: int) -> LiveChange:
    return LiveChange(account_id, 0, 0, LiveKind.reset)
