"""What the dashboard's templates show, made from what the services return: the user's inboxes, rows of
the conversation list, the words every page uses (a failure's name, a refused field, the window, a
held send). Presentation only: no rule lives here. A thread's messages are `thread_messages`, the
template pickers `template_picker`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import Path
from pydantic import ValidationError

from wagate.accounts.service import SessionUser
from wagate.channels.service import member_channels
from wagate.conversations.models import ConversationStatus, Window
from wagate.conversations.service import ConversationRow
from wagate.core.errors import WagateError, invalid_fields
from wagate.core.live import LiveChange
from wagate.http.limits import MAX_ID
from wagate.messages.models import SentMessage
from wagate.messages.schemas import SendMessageRequest
from wagate.runtime.gateway import Gateway
from wagate.templates.variables import MEDIA_HEADER
from wagate.whatsapp.explanations import code_of, explain

PathId = Path(ge=1, le=MAX_ID)


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


# Meta's answer to a template send under template pacing (API.md section 14): the words the dashboard
# shows wherever such a message's status is, until Meta's first status webhook moves it on.
HELD_FOR_QUALITY = "held_for_quality_assessment"
HELD_NOTE = (
    "Held by Meta for a quality check (template pacing): Meta sends it once early feedback on the"
    " template is good. It has not failed and is not sent again."
)


def held_note(upstream_status: str | None) -> str | None:
    return HELD_NOTE if upstream_status == HELD_FOR_QUALITY else None


def sent_by(sent: SentMessage) -> str:
    """Who sent a message, as the message log and its CSV say it."""
    message = sent.message
    return "Agent" if message.agent_user_id is not None else "Bulk" if message.batch_id else "API"


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
