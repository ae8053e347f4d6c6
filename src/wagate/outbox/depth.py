"""What waits in the outbox, lane by lane, for the metrics (`wagate_outbox_depth` and its age)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from wagate.observability.metrics import LaneDepth
from wagate.outbox.models import JobKind, OutboxJob


async def lane_depths(session: AsyncSession, now: datetime) -> list[LaneDepth]:
    """One row per job kind (and channel, for sends): how many rows, and how long the oldest due one
    has been due. Rows due later (a retry's back-off, a report's moment) count in the depth, not the age.

    One grouped statement over the outbox, read when Prometheus scrapes (every 15 s or so), never on
    the send path."""
    oldest_due = func.min(case((OutboxJob.run_at <= now, OutboxJob.run_at)))
    # Only sends have a lane per channel; other kinds' rows may name a channel too (a stored webhook
    # body, a template sync) but wait in one lane of their kind.
    lane = case((OutboxJob.kind == JobKind.send_message, OutboxJob.channel_id)).label("lane")
    statement = select(OutboxJob.kind, lane, func.count(), oldest_due).group_by(OutboxJob.kind, lane)
    depths = []
    for kind, channel_id, count, oldest in (await session.execute(statement)).all():
        age = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
        channel = str(channel_id) if channel_id is not None else ""
        depths.append(LaneDepth(str(kind.value if isinstance(kind, JobKind) else kind), channel, count, age))
    return depths
