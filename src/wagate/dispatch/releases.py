"""What the dispatcher does about the rows that other processes, or this one's lanes, left in doubt:
the rows of dispatchers known dead (released without waiting out their leases), and sends whose
outcome stayed unknown past their grace period (see dispatch/unsettled.py). `Dispatcher`
(dispatcher.py) is a `Releases`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.orm import Session

from wagate.core.config import Settings
from wagate.core.db import Database, utcnow
from wagate.core.live_hub import API_SESSION_PREFIX
from wagate.dispatch import jobs, unsettled
from wagate.dispatch.send_lane import ChannelLane
from wagate.events.subscriptions import Subscriptions
from wagate.outbox.isolation import write_isolating
from wagate.outbox.ownership import ChannelOwnership, session_name

log = logging.getLogger(__name__)


class Releases:
    """The releases of a `Dispatcher`, which sets these in its `__init__`."""

    db: Database
    settings: Settings
    worker_id: str
    ownership: ChannelOwnership
    lanes: dict[int, ChannelLane]
    started_at: float
    _live_sessions: set[str] | None
    wake_events: Callable[[], None]

    async def _receiving_since(self, up_for: float | None = None) -> datetime | None:
        """Since when Meta's status webhooks have been reaching the gateway, if for a whole grace
        period at least (None otherwise): silence proves a send never reached Meta only if they could.

        On SQLite they come to this process, so it must have listened that long itself (a restart after
        a crash is deaf to what Meta retries meanwhile); on PostgreSQL the webhooks
        come to the API processes, which may not be this one, so one of them must have been up as long
        (its LISTEN session's start, in `pg_stat_activity`; the longest-running one, since Meta's
        retries reach whichever answers). Only this database's: another gateway on the same server (or a
        test beside this one) receives another's webhooks, and counted here it made a restarted
        process resend sends whose statuses were still on their way (the parallel test run: 4 and 5
        sent twice). Without it, an API process down longer than a send's lease
        while a worker runs would have the worker send again what Meta had (the crash matrix: 4 of 300,
        serve killed with sends under way, back 5.3 s later). `up_for`: another period than the grace."""
        grace = self.settings.unconfirmed_send_grace_seconds if up_for is None else up_for
        if self.db.is_sqlite:  # one process: this one receives them
            listened = time.monotonic() - self.started_at
            return utcnow() - timedelta(seconds=listened) if listened >= grace else None
        async with self.db.read() as session:
            since: datetime | None = await session.scalar(
                text(
                    "SELECT min(backend_start) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name LIKE :prefix"
                    " AND backend_start <= now() - make_interval(secs => :grace)"
                ),
                {"prefix": API_SESSION_PREFIX + "%", "grace": grace},
            )
        return since

    async def _release_dead_owners(self) -> None:
        """The rows of dispatchers known dead that need not wait out their leases: stored Meta
        webhooks, event deliveries and reports at once (jobs.release_dead_owners); their single sends
        in flight after a short wait for Meta's status, when Meta's webhooks reached a live API process
        all along (unsettled.await_status_of_dead); their bulk sends keep their leases.
        PostgreSQL: a dispatcher whose locks' session is gone (killed, its machine lost), looked for at
        this process's start (every dispatcher may have died before it) and whenever a session
        disappeared since the last look, one glance at `pg_stat_activity` a second between. SQLite: one
        dispatcher runs, so rows stamped by another process at this one's start are a dead process's."""
        if self.ownership.sole:
            if self._live_sessions is not None:
                return
            live: set[str] | None = set()
        else:
            live = await self.ownership.live_sessions()
        if live is None:
            return
        vanished = self._live_sessions is None or bool(self._live_sessions - live)
        self._live_sessions = live
        if not vanished:
            return
        now = utcnow()
        async with self.db.read() as session:
            owners = await session.run_sync(lambda s: jobs.claimed_by(s, now))
        dead = {owner for owner in owners if owner != self.worker_id and session_name(owner) not in live}
        if not dead:
            return
        # Only the sends stored while an API process that still runs was up: Meta's statuses of those
        # reached a live receiver. For the others, Meta's retries of what it could not deliver may
        # still come, silence proves nothing, and they wait out their leases.
        receiving = None if self.ownership.sole else await self._receiving_since(up_for=0)
        status_by = now + timedelta(
            seconds=self.settings.upstream_timeout_seconds + unsettled.STATUS_FOLLOWS_SECONDS
        )

        def release(session: Session) -> tuple[int, int]:
            released = jobs.release_dead_owners(session, dead, now=now)
            if receiving is None:
                return released, 0
            singles = unsettled.await_status_of_dead(session, dead, stored_since=receiving, until=status_by)
            return released, singles

        released, singles = await self.db.write(release, first=True)
        log.info(
            "%d outbox rows and %d single sends of %d dead dispatchers released without their leases",
            released,
            singles,
            len(dead),
        )

    async def _release_unconfirmed(self, subscriptions: Subscriptions, *, webhooks_before: datetime) -> None:
        """Settle sends whose outcome stayed unknown too long (see unsettled.release_unconfirmed), except
        those a lane of this process still holds, whatever their lease says; one that cannot be
        settled is parked, not retried every second in front of the others."""
        async with self.db.read() as session:
            expired = await session.run_sync(lambda s: unsettled.expired_sends(s))
        held = {job for lane in self.lanes.values() for job in lane.holding}
        expired = [job for job in expired if job not in held]
        if not expired:
            return
        receiving_since = await self._receiving_since(up_for=0)
        if receiving_since is None:
            return
        # Meta's retries of what it could not deliver before then reach us within a grace period.
        caught_up = receiving_since + timedelta(seconds=self.settings.unconfirmed_send_grace_seconds)

        def release(session: Session, job_ids: Sequence[int]) -> int:
            return unsettled.release_unconfirmed(
                session,
                job_ids,
                subscriptions,
                webhooks_before=webhooks_before,
                receiving_since=receiving_since,
                caught_up=caught_up,
            )

        events, _ = await write_isolating(self.db, expired, release, unsettled.park_release)
        if sum(events):
            self.wake_events()
