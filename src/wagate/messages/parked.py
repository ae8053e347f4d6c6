"""Parked statuses that no send ever claims are forgotten after a while.

A status is parked when Meta reports on a wamid we do not know yet: the send's own result is about
to bring it (see `messages.webhooks.apply_parked_statuses`), within seconds. One still parked a day later
belongs to no send of ours (another tool on the same number, a send from before a restore) and never
will, so the hourly purge drops it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from wagate.messages.models import ParkedStatus

PARKED_STATUS_MAX_AGE = timedelta(days=1)


def purge_parked_statuses(session: Session, *, older_than: datetime, limit: int = 10_000) -> int:
    """Forget up to `limit` statuses parked before `older_than`; returns how many, so the caller runs
    it again in a transaction of its own until none is left (a backlog never makes one long one)."""
    found = select(ParkedStatus.id).where(ParkedStatus.received_at < older_than).limit(limit)
    ids = list(session.scalars(found))
    if ids:
        session.execute(delete(ParkedStatus).where(ParkedStatus.id.in_(ids)))
    return len(ids)
