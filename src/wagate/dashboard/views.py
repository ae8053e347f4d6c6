"""What the dashboard's templates show, made from what the services return: rows of the conversation
list, message bubbles with their ticks, the template picker. Presentation only: no rule lives here."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from fastapi import Path
from pydantic import ValidationError

from wagate.accounts.service import SessionUser, account_users
from wagate.api.deps import Gateway
from wagate.channels.service import member_channels
from wagate.conversations.models import ConversationStatus
from wagate.conversations.repository import ConversationRow
from wagate.conversations.service import Window
from wagate.core.errors import WagateError, invalid_fields
from wagate.core.live import LiveChange
from wagate.http.limits import MAX_ID
from wagate.messages.models import Direction, Message
from wagate.messages.repository import conversation_messages
from wagate.messages.schemas import SendMessageRequest, format_amount
from wagate.messages.standby import META_BUSINESS_AGENT
from wagate.templates.models import Template
from wagate.templates.render import render_message_template, render_template_text
from wagate.templates.service import list_templates, reply_templates
from wagate.templates.variables import MEDIA_HEADER, header_format
from wagate.whatsapp.explanations import Explanation, code_of, explain, explain_external_error

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
    """A conversation as a page shows it: the row, and how to name the customer."""

    row: ConversationRow

    @property
    def customer(self) -> str:
        """The number in E.164, else the username, else the user id (API.md section 13)."""
        row = self.row
        return row.phone_number or (f"@{row.username}" if row.username else None) or row.user_id or "?"


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
    retry: bool = False  # an agent's reply that failed and was not sent again since: Retry offered


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


def _author(message: Message, agents: dict[int, str]) -> str:
    if message.direction is Direction.inbound:
        return "Customer"
    if message.direction is Direction.system:
        return "WhatsApp"  # a notice of Meta's about the customer (a user id change)
    if message.sent_by == META_BUSINESS_AGENT:
        return "Meta Business Agent"  # its replies, echoed on `standby` (API.md section 14)
    if message.agent_user_id is not None:
        return agents.get(message.agent_user_id, "Agent")  # the agent by name, "Agent" once removed
    return "Bulk" if message.batch_id else "API"


def _what_was_said(message: Message) -> tuple[str | None, str | None, str]:
    return message.text, message.template_name, orjson.dumps(message.template_parameters).decode()


def _retry_offered(messages: list[Message]) -> set[str]:
    """Agents' replies that failed and whose words no later outbound message says again: once sent
    again (by Retry or by hand), the failure is answered and Retry goes."""
    offered: set[str] = set()
    said_later: set[tuple[str | None, str | None, str]] = set()
    for message in reversed(messages):
        if message.direction is not Direction.outbound:
            continue
        said = _what_was_said(message)
        if message.agent_user_id is not None and message.status.value == "failed" and said not in said_later:
            offered.add(message.id)
        said_later.add(said)
    return offered


async def messages_of(gateway: Gateway, row: ConversationRow) -> list[MessageItem]:
    async with gateway.db.read() as session:
        messages = await conversation_messages(session, conversation_id=row.id, limit=MESSAGES_SHOWN)
        agents: dict[int, str] = {}
        if any(message.agent_user_id is not None for message in messages):
            # One query for the names of the account's users (a handful), not one per reply.
            users = await account_users(session, account_id=messages[0].account_id)
            agents = {user.id: user.name for user in users}
    # Meta stamps a customer's message to the second, ours to the microsecond: within one second the
    # stamps cannot tell which came first (a reply at .4 s, the customer's answer stamped .0), so
    # there the order they were stored in decides: ids are time-ordered from the moment of storing.
    messages.sort(key=lambda message: (message.created_at.replace(microsecond=0), message.id))
    retry = _retry_offered(messages)
    items = []
    for message in messages:
        inbound = message.direction is not Direction.outbound  # the customer's, or a notice of Meta's
        author = _author(message, agents)
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
                error=str(failure_name(message.external_error)) if failed else None,
                explanation=explain_external_error(message.external_error) if failed else None,
                held=None if inbound else held_note(message.upstream_status),
                retry=message.id in retry,
            )
        )
    return items


@dataclass(frozen=True)
class FailureName:
    """What a failed send is called on every page: Meta's code with the title of our explanation
    table (`131047 24-hour window closed`), or our own reason in words (`Expired: ...`)."""

    code: int | None
    title: str

    def __str__(self) -> str:
        return f"{self.code} {self.title}" if self.code is not None else self.title


def failure_name(external_error: str | None) -> FailureName | None:
    """The one name of a failure (a message's `external_error`, a chart's reason, a bulk recipient's
    error code) for every page: the message log, its chart, the thread and the bulk batch say the same
    words for the same code. Meta's own title (`"131047: Re-engagement message"`) is used only for a
    code our table does not explain."""
    if not external_error:
        return None
    code = code_of(external_error)
    reason, _, rest = external_error.partition(":")
    if code is not None:
        explanation = explain(code)
        title = explanation.title if explanation else rest.strip() or "Meta error"
        return FailureName(code, title)
    words = reason.strip().replace("_", " ")  # our own reasons: `expired: ...`, `invalid_phone_number`
    words = words[:1].upper() + words[1:]
    return FailureName(None, f"{words}: {rest.strip()}" if rest.strip() else words)


# The API's field names as pages call them (`error_words`); a field not here is said by its last part.
FIELD_WORDS = {
    "text": "Message",
    "phone_number": "Number",
    "user_id": "User id",
    "channel_id": "Channel",
    "template": "Template",
    "template.name": "Template",
    "template.language": "Template language",
    "template.parameters": "Template values",
    "url": "Webhook URL",
    "events": "Events",
    "name": "Name",
    "from": "From",
    "to": "To",
    "created_after": "From",
    "created_before": "To",
    "error_code": "Error code",
    "recipients": "Recipients",
}


def field_words(field: str, labels: dict[str, str] | None = None) -> str:
    """`template.parameters.1` -> `Template value Body {{1}}`, `phone_number` -> `Number`."""
    named = {**FIELD_WORDS, **(labels or {})}
    if field in named:
        return named[field]
    parts = field.split(".")
    if parts[:2] == ["template", "parameters"] and len(parts) > 2:
        return "Template value " + variable_label(".".join(parts[2:]))
    last = next((part for part in reversed(parts) if not part.isdigit()), field)
    words = named.get(last, last.replace("_", " "))
    return words[:1].upper() + words[1:]


def variable_label(variable: str) -> str:
    """A template variable as the picker labels it: `1` -> `Body {{1}}`, `header.1` -> `Header {{1}}`,
    `button.0` -> `Button 1`, a media header (`header`) as `Header file (link)`, a named one as its name."""
    if variable == MEDIA_HEADER:
        return "Header file (link)"
    part, _, name = variable.rpartition(".")
    if part == "button" and name.isdigit():
        return f"Button {int(name) + 1}"
    if part:
        return f"{part.capitalize()} {{{{{name}}}}}"
    return f"Body {{{{{variable}}}}}" if variable.isdigit() else variable


def error_words(error: Any, labels: dict[str, str] | None = None) -> str:
    """A refusal as a page says it: the API's summary names its fields (`The request is not valid:
    text: ...`, pydantic's locations); a page names them as its form does (`Message: ...`). A message
    already in words (`The phone number is not a valid number.`) is kept as it is. The one place pages
    turn an API error into words (error pages, the reply box, the filters, the settings forms)."""
    message = str(getattr(error, "message", error))
    details = [d for d in getattr(error, "details", None) or [] if d.get("field")]
    if not any(f"{d['field']}:" in message for d in details):
        return message
    return "; ".join(f"{field_words(str(d['field']), labels)}: {d.get('issue')}" for d in details) + "."


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


def duration(seconds: int) -> str:
    """Time left as pages say it: `39 min`, `2 h 15 min`, `3 h`."""
    minutes = max(1, seconds // 60)  # "1 min" until it is closed, never "0 min"
    hours, minutes = divmod(minutes, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def window_words(window: Window) -> str:
    """The window in words, as the conversation page shows it (conversation.js counts down the same way)."""
    if window.state == "closed":
        return "Window closed: only templates can be sent"
    left = duration(window.seconds_remaining)
    if window.state == "closing":
        return f"Window closes in {left} — reply now"
    return f"Window open: {left} left"


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
    return error_words(error)


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
