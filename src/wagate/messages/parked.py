"""Parked statuses that no send ever claims are forgotten after a while.

A status is parked when Meta reports on a wamid we do not know yet: the send's own result is about
to bring it (see `messages.meta_statuses.apply_parked_statuses`), within seconds. One still parked a day later
belongs to no send of ours (another tool on the same number, a send from before a restore) and never
will: the hourly purge moves it to the dead letters, where an operator sees it (`wagate dead-letters`)
with its reason, as every other item of Meta's that could not be applied (API.md section 13).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from wagate.core.db import utcnow
from wagate.messages.models import ParkedStatus
from wagate.outbox.dead_letters import DeadLetter

PARKED_STATUS_MAX_AGE = timedelta(days=1)
# The dead letters' kind of a Meta status about a wamid no message of ours has.
UNCLAIMED_STATUS = "meta_status_unclaimed"


def purge_parked_statuses(session: Session, *, older_than: datetime, limit: int = 10_000) -> int:
    """Move up to `limit` statuses parked before `older_than` to the dead letters; returns how many, so
    the caller runs it again in a transaction of its own until none is left (a backlog never makes one
    long one)."""
    found = select(ParkedStatus).where(ParkedStatus.received_at < older_than).limit(limit)
    parked = list(session.scalars(found))
    if not parked:
        return 0
    now = utcnow()
    session.execute(
        insert(DeadLetter),
        [
            {
                "kind": UNCLAIMED_STATUS,
                "reference": status.upstream_message_id[:80],
                "payload": {"channel_id": status.channel_id, "item": status.payload},
                "error": "unknown wamid: no message of this gateway has it (parked a day)",
                "attempts": 1,
                "created_at": now,
            }
            for status in parked
        ],
    )
    session.execute(delete(ParkedStatus).where(ParkedStatus.id.in_([status.id for status in parked])))
    return len(parked)
