"""Channel leases: one worker at a time paces a channel, so Meta's per-number limit holds across workers."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from wagate.db import dialect_name, utcnow
from wagate.outbox.models import ChannelLease


async def acquire_channel_leases(
    session: AsyncSession, *, channel_ids: Iterable[int], owner: str, ttl: timedelta
) -> set[int]:
    """Take or renew the lease of each channel that is free, expired or already ours; returns those held."""
    now = utcnow()
    ids = sorted(set(channel_ids))
    query = select(ChannelLease).where(ChannelLease.channel_id.in_(ids))
    if dialect_name(session) == "postgresql":
        query = query.with_for_update()
    leases = {lease.channel_id: lease for lease in await session.scalars(query)}
    held: set[int] = set()
    for channel_id in ids:
        lease = leases.get(channel_id)
        if lease is None:
            session.add(ChannelLease(channel_id=channel_id, owner=owner, expires_at=now + ttl))
        elif lease.owner == owner or lease.expires_at < now:
            lease.owner = owner
            lease.expires_at = now + ttl
        else:
            continue
        held.add(channel_id)
    await session.flush()
    return held
