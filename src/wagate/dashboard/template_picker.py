"""The template pickers of the dashboard (the reply box when the window is closed, the bulk form): a
channel's approved templates with their variables, and the values a form gives for them as the API's
`template.parameters`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wagate.messages.queries import reply_templates
from wagate.runtime.gateway import Gateway
from wagate.templates.models import Template
from wagate.templates.render import render_template_text
from wagate.templates.service import list_templates
from wagate.templates.variables import MEDIA_HEADER, header_format


@dataclass(frozen=True)
class TemplateChoice:
    value: str  # "name|language", what the form posts
    name: str
    language: str
    category: str
    variables: list[str]
    body: str
    header_format: str | None = None  # DOCUMENT, IMAGE, VIDEO: the variable "header" is its link


# A form's (or a CSV's) field for a document header's file name, beside the link in "header".
MEDIA_FILENAME_FIELD = "header_filename"


def form_parameters(values: dict[str, str], variables: list[str]) -> dict[str, Any]:
    """The values a form or a CSV row gives for a template's variables, as the API's object form of
    `template.parameters`: a media header's link (`header`) and file name (`header_filename`) become
    the header object `{"link", "filename"}` (API.md section 14)."""
    parameters: dict[str, Any] = {k: v for k, v in values.items() if k != MEDIA_FILENAME_FIELD}
    if MEDIA_HEADER in variables and MEDIA_HEADER in parameters:
        header: dict[str, str] = {"link": parameters[MEDIA_HEADER]}
        if values.get(MEDIA_FILENAME_FIELD):
            header["filename"] = values[MEDIA_FILENAME_FIELD]
        parameters[MEDIA_HEADER] = header
    return parameters


def _choices(found: list[Template]) -> list[TemplateChoice]:
    choices = []
    for template in found:
        # The placeholders stay: the picker fills them in as the agent types (app.js).
        body = render_template_text(template.components, {}).body
        choices.append(
            TemplateChoice(
                f"{template.name}|{template.language}",
                template.name,
                template.language,
                template.category,
                list(template.variables),
                body,
                header_format(template.components),
            )
        )
    return choices


async def templates_for(gateway: Gateway, channel_id: int) -> list[TemplateChoice]:
    """The channel's approved templates, for a template picker."""
    async with gateway.db.read() as session:
        found = await list_templates(session, channel_ids=[channel_id], status="APPROVED")
    return _choices(found)


@dataclass(frozen=True)
class ReplyTemplateChoices:
    recent: list[TemplateChoice]  # "Recently used": the account's last sent first
    others: list[TemplateChoice]

    def __bool__(self) -> bool:
        return bool(self.recent or self.others)

    @property
    def all(self) -> list[TemplateChoice]:
        return self.recent + self.others


async def reply_templates_for(gateway: Gateway, *, account_id: int, channel_id: int) -> ReplyTemplateChoices:
    """The reply box's picker when the window is closed: recently used templates first."""
    async with gateway.db.read() as session:
        found = await reply_templates(session, account_id=account_id, channel_id=channel_id)
    return ReplyTemplateChoices(_choices(found.recent), _choices(found.others))
