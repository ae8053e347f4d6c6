from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from wagate.templates.models import Template
from wagate.templates.variables import header_format

_WITH_REASON = ("REJECTED", "PAUSED", "DISABLED")


class TemplateOut(BaseModel):
    channel_id: int
    name: str
    language: str
    category: str
    status: str
    # Meta's quality rating (GREEN, YELLOW, RED, UNKNOWN; null until Meta rated it), a recategorisation
    # Meta announced and has not made yet, and why a rejected, paused or disabled template is so.
    quality: str | None = None
    pending_category: str | None = None
    rejected_reason: str | None = None
    parameter_format: str
    # The header's format: DOCUMENT, IMAGE or VIDEO (its link is the variable "header"), TEXT, or None.
    header_format: str | None = None
    variables: list[str]
    components: list[dict[str, Any]]

    @classmethod
    def of(cls, template: Template) -> TemplateOut:
        return cls(
            channel_id=template.channel_id,
            name=template.name,
            language=template.language,
            category=template.category,
            status=template.status,
            quality=template.quality,
            pending_category=template.pending_category,
            rejected_reason=template.rejected_reason if template.status in _WITH_REASON else None,
            parameter_format=template.parameter_format,
            header_format=header_format(template.components),
            variables=template.variables,
            components=template.components,
        )


class TemplateList(BaseModel):
    data: list[TemplateOut]
