"""Templates: looked up for sends, listed for callers, synced from the channel's WhatsApp account."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.accounts.auth import Principal
from wagate.channels.models import Channel
from wagate.core.cache import Caches, Part, TTLCache
from wagate.core.db import utcnow
from wagate.core.errors import ChannelNotFound, TemplateNotApproved, TemplateNotFound
from wagate.outbox.models import JobKind, OutboxJob, Priority
from wagate.runtime.gateway import Gateway
from wagate.templates import repository
from wagate.templates.models import Template

# Published for the dispatcher's template sync: a channel's templates replaced by what Meta lists.
from wagate.templates.repository import replace_templates as replace_templates

# A channel's template by (channel, name, language), None when it has none: every template send reads it.
TEMPLATES: Part[TTLCache[tuple[int, str, str], Template | None]] = Part("templates", TTLCache)

APPROVED = "APPROVED"


def require_approved(template: Template | None, *, name: str, language: str) -> Template:
    """The template a send may use: it exists for the channel and Meta approved it (422 otherwise)."""
    if template is None:
        raise TemplateNotFound(
            f"The channel has no template '{name}' in language '{language}'.",
            details=[{"field": "template.name", "issue": "not found for this channel and language"}],
        )
    if template.status != APPROVED:
        raise TemplateNotApproved(
            f"Template '{name}' ({language}) is {template.status}, not APPROVED.",
            details=[{"field": "template.name", "issue": f"status is {template.status}"}],
        )
    return template


async def cached_template(caches: Caches, channel_id: int, name: str, language: str) -> Template | None:
    """The channel's template of this name and language (approved or not), from the process's cache."""

    async def load() -> Template | None:
        async with caches.db.read() as session:
            return await repository.find_template(
                session, channel_id=channel_id, name=name, language=language
            )

    return await caches[TEMPLATES].get_or_load((channel_id, name, language), load)


def forget_templates(caches: Caches) -> None:
    """After a sync in this process: its result applies at once."""
    caches[TEMPLATES].clear()


async def list_templates(
    session: AsyncSession,
    *,
    channel_ids: Sequence[int],
    name: str | None = None,
    language: str | None = None,
    category: str | None = None,
    status: str | None = None,
) -> list[Template]:
    """The templates of these channels, filtered; category and status as Meta spells them, any case."""
    return await repository.find_templates(
        session,
        channel_ids=channel_ids,
        name=name,
        language=language,
        category=category.upper() if category else None,
        status=status.upper() if status else None,
    )


@dataclass(frozen=True)
class TemplatePage:
    rows: list[Template]
    has_more: bool


async def template_page(
    session: AsyncSession, *, channel_ids: Sequence[int], offset: int = 0, limit: int = 50
) -> TemplatePage:
    """The templates of these channels by channel, name and language, `limit` from `offset` (a list
    that changes only when synced, so counting from the start is exact enough)."""
    found = list(
        await session.scalars(
            select(Template)
            .where(Template.channel_id.in_(channel_ids))
            .order_by(Template.channel_id, Template.name, Template.language, Template.id)
            .offset(offset)
            .limit(limit + 1)
        )
    )
    return TemplatePage(found[:limit], len(found) > limit)


# --- syncing from the WhatsApp Business Account ---------------------------------------------------
#
# A channel's templates are synced by its periodic `sync_templates` job (wagate.dispatch.jobs), which
# the dispatcher runs in whichever process claims it. "Sync now" makes that job due at once and wakes
# the dispatcher: the same fetch, store and cache reset as every hour's, its failures retried and kept
# in the job's `last_error` the same way.


@dataclass(frozen=True)
class SyncState:
    """Where a channel's template sync stands, as the settings page shows it."""

    channel_id: int
    synced_at: datetime | None  # the last sync that succeeded
    templates: int  # how many templates that sync stored
    under_way: bool  # asked for (due or running) and not finished yet
    last_error: str | None  # why the last attempt failed, when it did
    next_at: datetime | None  # when the job runs next, when not under way


async def template_sync_states(session: AsyncSession, *, channels: Sequence[Channel]) -> dict[int, SyncState]:
    ids = [channel.id for channel in channels]
    wanted = set(ids)
    counts: dict[int, int] = {
        channel_id: count
        for channel_id, count in await session.execute(
            select(Template.channel_id, func.count())
            .where(Template.channel_id.in_(ids))
            .group_by(Template.channel_id)
        )
    }
    jobs: dict[int, tuple[datetime, datetime | None, str | None]] = {}
    for payload, run_at, locked_until, last_error in await session.execute(
        select(OutboxJob.payload, OutboxJob.run_at, OutboxJob.locked_until, OutboxJob.last_error).where(
            OutboxJob.kind == JobKind.sync_templates
        )
    ):
        channel_id = payload.get("channel_id") if isinstance(payload, dict) else None
        if channel_id in wanted:
            jobs[channel_id] = (run_at, locked_until, last_error)
    now = utcnow()
    states: dict[int, SyncState] = {}
    for channel in channels:
        run_at, locked_until, last_error = jobs.get(channel.id, (None, None, None))
        running = locked_until is not None and locked_until > now
        due = run_at is not None and run_at <= now
        states[channel.id] = SyncState(
            channel_id=channel.id,
            synced_at=channel.templates_synced_at,
            templates=counts.get(channel.id, 0),
            under_way=running or due,
            last_error=last_error,
            next_at=None if running or due else run_at,
        )
    return states


async def request_template_sync(gateway: Gateway, *, principal: Principal, channel_id: int) -> bool:
    """Sync the channel's templates now (administrators only; 404 for a channel of another account):
    its sync job is made due and the dispatcher woken. True when started, False when a sync of the
    channel is running already (it brings the same list)."""
    principal.require_administrator()

    def unit(session: Session) -> bool:
        found = session.scalar(
            select(Channel.id).where(Channel.id == channel_id, Channel.account_id == principal.account_id)
        )
        if found is None:
            raise ChannelNotFound()
        now = utcnow()
        jobs = [
            (job_id, locked_until)
            for job_id, payload, locked_until in session.execute(
                select(OutboxJob.id, OutboxJob.payload, OutboxJob.locked_until).where(
                    OutboxJob.kind == JobKind.sync_templates
                )
            )
            if isinstance(payload, dict) and payload.get("channel_id") == channel_id
        ]
        if any(locked_until is not None and locked_until > now for _, locked_until in jobs):
            return False
        if jobs:
            session.execute(
                update(OutboxJob).where(OutboxJob.id.in_([j for j, _ in jobs])).values(run_at=now)
            )
        else:  # a channel the dispatcher has not scheduled yet: its periodic job starts here
            session.add(
                OutboxJob(
                    kind=JobKind.sync_templates,
                    priority=Priority.background,
                    payload={"channel_id": channel_id},
                    run_at=now,
                )
            )
        session.flush()
        return True

    started: bool = await gateway.db.write(unit)
    if started:
        gateway.dispatcher.wake()
    return started
