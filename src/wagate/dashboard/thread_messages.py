"""The messages of a conversation's thread as the dashboard shows them: bubbles with their author, their
ticks (queued, sent, delivered, read, failed), a template message's text, a failure's explanation, and
Retry on an agent's failed reply."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import orjson

from wagate.accounts.service import account_users
from wagate.conversations.service import ConversationRow
from wagate.dashboard.views import failure_name, held_note
from wagate.messages.models import Direction, Message
from wagate.messages.queries import conversation_messages
from wagate.messages.schemas import format_amount
from wagate.messages.standby import META_BUSINESS_AGENT
from wagate.runtime.gateway import Gateway
from wagate.templates.render import message_template_text
from wagate.templates.service import cached_template
from wagate.whatsapp.explanations import Explanation, explain_external_error

MESSAGES_SHOWN = 200


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
            template = await cached_template(
                gateway.caches, message.channel_id, message.template_name, message.template_language
            )
            if template is not None:
                template_text = message_template_text(
                    template.components, template.variables, message.template_parameters
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
