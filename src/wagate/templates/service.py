"""Templates: looked up for sends, listed for callers, synced from the channel's WhatsApp account."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from wagate.errors import TemplateNotApproved, TemplateNotFound
from wagate.templates import repository
from wagate.templates.models import Template

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
