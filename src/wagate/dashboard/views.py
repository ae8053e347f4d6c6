"""What the dashboard's templates show, made from what the services return: rows of the conversation
list, message bubbles with their ticks, the template picker. Presentation only: no rule lives here."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from fastapi import Path
from pydantic import ValidationError

from wagate.accounts.service import SessionUser
from wagate.channels.service import member_channels
from wagate.conversations.models import ConversationStatus
from wagate.conversations.repository import ConversationRow
from wagate.deps import Gateway
from wagate.errors import WagateError, invalid_fields
from wagate.limits import MAX_ID
from wagate.live import LiveChange
from wagate.messages.models import Direction, Message
from wagate.messages.repository import conversation_messages
from wagate.messages.schemas import SendMessageRequest, format_amount
from wagate.messages.standby import META_BUSINESS_AGENT
from wagate.templates.render import render_message_template, render_template_text
from wagate.templates.service import list_templates
from wagate.templates.variables import MEDIA_HEADER, header_format
from wagate.whatsapp.explanations import Explanation, explain_external_error

PathId = Path(ge=1, le=MAX_ID)
MESSAGES_SHOWN = 200


@dataclass(frozen=True)
class Refusal:
    """A refusal to show on a page, like a WagateError's."""

    message: str
    status_code: int = 403
    code: str = "forbidden"


@dataclass(frozen=True)
class Inbox:
    id: int
    name: str
    phone_number: str


async def inboxes_of(gateway: Gateway, user: SessionUser) -> list[Inbox]:
    async with gateway.db.read() as session:
        channels = await member_channels(session, principal=user.principal)
    return [Inbox(c.id, c.name, c.phone_number) for c in channels]


@dataclass(frozen=True)
class ConversationItem:
    """A conversation as a page shows it: the row, and how to name the customer and page the list."""

    row: ConversationRow

    @property
    def customer(self) -> str:
        """The number in E.164, else the username, else the user id (API.md section 13)."""
        row = self.row
        return row.phone_number or (f"@{row.username}" if row.username else None) or row.user_id or "?"

    @property
    def cursor(self) -> str:
        return f"{self.row.last_activity_at.isoformat()}_{self.row.id}"


@dataclass(frozen=True)
class Tick:
    status: str  # queued, sent, delivered, read, failed
    label: str
    at: str | None  # ISO time, when known


@dataclass(frozen=True)
class MessageItem:
    id: str
    direction: str  # inbound / outbound
    author: str  # Customer, API, Agent, Bulk
    status: str
    text: str | None
    template_name: str | None
    template_text: str | None
    created_at: datetime
    cost: str
    batch_id: str | None
    ticks: list[Tick] = field(default_factory=list)
    error: str | None = None
    explanation: Explanation | None = None
    held: str | None = None  # what Meta holding the send means (`held_note`), while it does


# Meta's answer to a template send under template pacing (API.md section 14): the words the dashboard
# shows wherever such a message's status is, until Meta's first status webhook moves it on.
HELD_FOR_QUALITY = "held_for_quality_assessment"
HELD_NOTE = (
    "Held by Meta for a quality check (template pacing): Meta sends it once early feedback on the"
    " template is good. It has not failed and is not sent again."
)


def held_note(upstream_status: str | None) -> str | None:
    return HELD_NOTE if upstream_status == HELD_FOR_QUALITY else None


_TICK_LABELS = {
    "queued": "Queued",
    "sent": "Sent",
    "delivered": "Delivered",
    "read": "Read",
    "failed": "Failed",
}


def _ticks(message: Message) -> list[Tick]:
    """Queued when accepted, sent once Meta took it (it has Meta's id), then what Meta reported. A
    reply of Meta's AI agent was never queued here: it is sent when Meta echoes it."""
    history = {entry["status"]: entry["at"] for entry in message.status_history}
    if message.sent_by is not None:
        return [Tick("sent", _TICK_LABELS["sent"], history.get("sent"))] + [
            Tick(status, _TICK_LABELS[status], history[status])
            for status in ("delivered", "read", "failed")
            if status in history
        ]
    ticks = [Tick("queued", _TICK_LABELS["queued"], history.get("sent"))]
    if message.upstream_message_id is not None or message.status.value in ("delivered", "read"):
        ticks.append(Tick("sent", _TICK_LABELS["sent"], None))
    for status in ("delivered", "read", "failed"):
        if status in history:
            ticks.append(Tick(status, _TICK_LABELS[status], history[status]))
    return ticks


def _author(message: Message) -> str:
    if message.direction is Direction.inbound:
        return "Customer"
    if message.direction is Direction.system:
        return "WhatsApp"  # a notice of Meta's about the customer (a user id change)
    if message.sent_by == META_BUSINESS_AGENT:
        return "Meta Business Agent"  # its replies, echoed on `standby` (API.md section 14)
    if message.agent_user_id is not None:
        return "Agent"
    return "Bulk" if message.batch_id else "API"


async def messages_of(gateway: Gateway, row: ConversationRow) -> list[MessageItem]:
    async with gateway.db.read() as session:
        messages = await conversation_messages(session, conversation_id=row.id, limit=MESSAGES_SHOWN)
    items = []
    for message in messages:
        inbound = message.direction is not Direction.outbound  # the customer's, or a notice of Meta's
        author = _author(message)
        template_text = None
        if message.template_name and message.template_language:
            template = await gateway.lookups.template(
                message.channel_id, message.template_name, message.template_language
            )
            rendered = (
                render_message_template(template.components, template.variables, message.template_parameters)
                if template is not None
                else None
            )
            if rendered is not None:
                template_text = "\n".join(
                    part for part in (rendered.header, rendered.body, rendered.footer) if part
                )
        failed = message.status.value == "failed"
        items.append(
            MessageItem(
                id=message.id,
                direction=message.direction.value,
                author=author,
                status=message.status.value,
                text=message.text,
                template_name=message.template_name,
                template_text=template_text,
                created_at=message.created_at,
                cost=f"{format_amount(0 if failed else message.cost_micros)} {message.cost_currency}".strip()
                if not inbound and (message.sent_by is None or message.cost_micros)
                else "",
                batch_id=message.batch_id,
                ticks=[] if inbound else _ticks(message),
                error=message.external_error if failed else None,
                explanation=explain_external_error(message.external_error) if failed else None,
                held=None if inbound else held_note(message.upstream_status),
            )
        )
    return items


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


async def templates_for(gateway: Gateway, channel_id: int) -> list[TemplateChoice]:
    """The channel's approved templates, for the reply box's picker when the window is closed."""
    async with gateway.db.read() as session:
        found = await list_templates(session, channel_ids=[channel_id], status="APPROVED")
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


def send_request(
    row: ConversationRow,
    *,
    text: str | None,
    template: dict[str, Any] | None,
    conversation_status: str | None,
) -> SendMessageRequest:
    """The reply as the API's own request body: to the number, or to the user id of a customer known
    without one (API.md section 13). The form's fields are checked here, all at once, as the API
    checks its body and refuses it with the same words (`invalid_fields`), never an error of the page."""
    recipient: dict[str, Any] = (
        {"phone_number": row.phone_number} if row.phone_number else {"user_id": row.user_id}
    )
    body: dict[str, Any] = {"channel_id": row.channel_id, **recipient}
    if template is not None:
        body["template"] = template
    else:
        body["text"] = text
    if conversation_status in (ConversationStatus.open.value, ConversationStatus.pending.value):
        body["conversation_status"] = conversation_status
    try:
        return SendMessageRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_fields(exc.errors()) from None


def explain_refusal(error: WagateError) -> str:
    """A refusal of the send pipeline, in the reply box's words."""
    if error.code == "window_closed":
        return (
            "The 24-hour window is closed: the customer has not written for a day. Send a template instead."
        )
    # A detail the message already names (`invalid_fields` sums its details up) is not said twice.
    details = [f"{d.get('field')}: {d.get('issue')}" for d in (error.details or [])]
    unsaid = "; ".join(detail for detail in details if detail not in error.message)
    return f"{error.message} {unsaid}".strip()


def live_event(change: LiveChange) -> str:
    return orjson.dumps(
        {
            "conversation_id": change.conversation_id,
            "channel_id": change.channel_id,
            "kind": change.kind,
            "inbound": change.inbound,
            "conversation_status": change.conversation_status,
            "message_id": change.message_id,
        }
    ).decode()
