"""A conversation's last message: who wrote it, what the list keeps of it, and whether the customer
waits for an answer (the one place that is decided)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from wagate.conversations.models import (
    LAST_MESSAGE_KEY_LENGTH,
    LAST_MESSAGE_LENGTH,
    TEMPLATE_NAME_LENGTH,
    Conversation,
)
from wagate.conversations.search import fold

# Who wrote a conversation's last message (`Conversation.last_message_from`).
FROM_CUSTOMER = "customer"
FROM_AGENT = "agent"  # a dashboard user (an agent's reply, text or template)
FROM_API = "api"  # a free-form message sent through the API: the company's system answering
FROM_TEMPLATE = "template"  # a template sent through the API or in bulk (an OTP, a notification)
FROM_META_AGENT = "meta_business_agent"  # Meta's AI agent, echoed on `standby` (API.md section 14)

# What ends a customer's waiting (issue 46), the one place it is decided: a reply written to the
# customer, by an agent in the dashboard, by the company's system as free text through the API, or
# by Meta's AI agent while it holds the conversation. A template sent through the API or in bulk
# (an OTP code, a notification) answers nothing: it resolves the conversation (spec section 3) but
# the customer still waits, and "Needs reply" keeps showing them. A customer's message starts the
# waiting when they were not waiting already; Meta's system notices (a user id change) do neither.
ENDS_WAITING = frozenset({FROM_AGENT, FROM_API, FROM_META_AGENT})


def written_by(*, inbound: bool, template: bool, agent_user_id: int | None, sent_by: str | None) -> str:
    """Who wrote a message, as `last_message_from` records it."""
    if inbound:
        return FROM_CUSTOMER
    if sent_by is not None:
        return FROM_META_AGENT
    if agent_user_id is not None:
        return FROM_AGENT
    return FROM_TEMPLATE if template else FROM_API


@dataclass(frozen=True)
class LastMessage:
    """What a conversation keeps of its last message: what the list shows and search reads (a
    template's body as the customer read it, with the template's name, as the thread shows it)."""

    written_by: str
    text: str | None = None
    template_name: str | None = None
    agent_user_id: int | None = None

    def columns(self) -> dict[str, Any]:
        text = self.text
        if text is not None and len(text) > LAST_MESSAGE_LENGTH:
            text = text[: LAST_MESSAGE_LENGTH - 1] + "\u2026"
        return {
            "last_message_text": text,
            "last_message_key": fold(text)[:LAST_MESSAGE_KEY_LENGTH] if text else None,
            "last_message_from": self.written_by,
            "last_message_author": self.template_name[:TEMPLATE_NAME_LENGTH] if self.template_name else None,
            "last_message_agent_id": self.agent_user_id,
        }


def note_last_message(conversation: Conversation, last: LastMessage, *, at: datetime) -> None:
    """A message written into a conversation loaded in the session (a customer's message, a reply of
    Meta's AI agent): its last message, and whether the customer waits since `at` (see ENDS_WAITING)."""
    for column, value in last.columns().items():
        setattr(conversation, column, value)
    if last.written_by == FROM_CUSTOMER:
        if conversation.waiting_since is None:
            conversation.waiting_since = at
    elif last.written_by in ENDS_WAITING:
        conversation.waiting_since = None


# The columns of the last message a send writes (`LastMessage.columns`).
LAST_MESSAGE_COLUMNS = (
    "last_message_text",
    "last_message_key",
    "last_message_from",
    "last_message_author",
    "last_message_agent_id",
)
