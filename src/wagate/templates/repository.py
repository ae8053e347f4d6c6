"""The SQL of templates: found for sends and listings, replaced by a sync."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.channels.models import Channel
from wagate.core.db import utcnow
from wagate.templates.models import Template
from wagate.templates.variables import template_variables
from wagate.whatsapp.outbound import TemplateRecord


async def find_template(
    session: AsyncSession, *, channel_id: int, name: str, language: str
) -> Template | None:
    found: Template | None = await session.scalar(
        select(Template).where(
            Template.channel_id == channel_id, Template.name == name, Template.language == language
        )
    )
    return found


async def find_templates(
    session: AsyncSession,
    *,
    channel_ids: Sequence[int],
    name: str | None = None,
    language: str | None = None,
    category: str | None = None,
    status: str | None = None,
) -> list[Template]:
    query = select(Template).where(Template.channel_id.in_(channel_ids))
    if name is not None:
        query = query.where(Template.name == name)
    if language is not None:
        query = query.where(Template.language == language)
    if category is not None:
        query = query.where(Template.category == category)
    if status is not None:
        query = query.where(Template.status == status)
    return list(await session.scalars(query.order_by(Template.channel_id, Template.name, Template.language)))


def replace_templates(session: Session, *, channel: Channel, records: Sequence[TemplateRecord]) -> int:
    """Make the channel's stored templates exactly the synced list; returns how many there are."""
    existing = {
        (t.name, t.language): t
        for t in session.scalars(select(Template).where(Template.channel_id == channel.id))
    }
    now = utcnow()
    seen: set[tuple[str, str]] = set()
    for record in records:
        key = (record.name, record.language)
        seen.add(key)
        category = record.category.upper()
        template = existing.get(key)
        if template is None:
            template = Template(channel_id=channel.id, name=record.name, language=record.language)
            session.add(template)
        template.meta_id = record.id
        if template.pending_category is not None and template.pending_category == category:
            template.pending_category = None  # the change Meta announced is made (its webhook may be lost)
        template.category = category
        template.status = record.status.upper()
        # What the listing says, as the template webhooks do (templates/lifecycle.py); an announced
        # recategorisation only a webhook says is kept, and so is what the listing does not give.
        if record.quality is not None:
            template.quality = record.quality
        if template.status == "APPROVED":
            template.rejected_reason = None
        elif record.rejected_reason is not None:
            template.rejected_reason = record.rejected_reason[:500]
        template.parameter_format = (record.parameter_format or "POSITIONAL").upper()
        template.components = list(record.components)
        template.variables = template_variables(template.components, category)
        template.synced_at = now
    gone = [t.id for key, t in existing.items() if key not in seen]
    if gone:
        session.execute(delete(Template).where(Template.id.in_(gone)))
    channel.templates_synced_at = now
    session.flush()
    return len(seen)
