from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from wagate.templates.models import Template


class TemplateOut(BaseModel):
    channel_id: int
    name: str
    language: str
    category: str
    status: str
    parameter_format: str
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
            parameter_format=template.parameter_format,
            variables=template.variables,
            components=template.components,
        )


class TemplateList(BaseModel):
    data: list[TemplateOut]
