from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Enum, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from wagate.conversations.models import HANDLED_BY_APP, USER_ID_LENGTH, ConversationStatus, Window
from wagate.core.db import utcnow
from wagate.core.tables import Base, UTCDateTime
from wagate.events.models import EventKind
from wagate.events.subscriptions import NO_SUBSCRIPTIONS, Subscriptions
from wagate.outbox.models import Priority
from wagate.templates.models import Template
from wagate.templates.variables import Value


class MessageStatus(enum.StrEnum):
    sent = "sent"
    delivered = "delivered"
    read = "read"
    failed = "failed"


class SentAs(enum.StrEnum):
    session = "session"
    template = "template"


class Direction(enum.StrEnum):
    outbound = "outbound"
    inbound = "inbound"
    # A notice of Meta's about the customer (a system message, such as a user id change): shown in
    # the conversation, neither sent nor written by anyone in it.
    system = "system"


EXTERNAL_ERROR_LENGTH = 1000


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        # The message log (GET .../whatsapp/messages, /messages): an inbox's sent messages newest first,
        # paged by (created_at, id); several inboxes are read one range each and merged.
        Index("ix_messages_log", "channel_id", "direction", "created_at", "id"),
        # The same list for one number ("did this customer get the code?"): without it, a scan.
        Index("ix_messages_number_log", "account_id", "phone_number", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    # The account and channel of its conversation, and checked (and deleted) through it: a foreign key
    # of their own would cost every insert two more checks (migration 0016).
    account_id: Mapped[int] = mapped_column(Integer)
    channel_id: Mapped[int] = mapped_column(Integer)
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    direction: Mapped[Direction] = mapped_column(Enum(Direction, native_enum=False, length=10))
    # Empty for a customer known only by Meta's user id (API.md section 13).
    phone_number: Mapped[str | None] = mapped_column(String(32), nullable=True)
    user_id: Mapped[str | None] = mapped_column(String(USER_ID_LENGTH), nullable=True)
    status: Mapped[MessageStatus] = mapped_column(Enum(MessageStatus, native_enum=False, length=20))
    sent_as: Mapped[SentAs | None] = mapped_column(Enum(SentAs, native_enum=False, length=20), nullable=True)
    text: Mapped[str | None] = mapped_column(Text, nullable=True)
    template_name: Mapped[str | None] = mapped_column(String(512), nullable=True)
    template_language: Mapped[str | None] = mapped_column(String(20), nullable=True)
    template_category: Mapped[str | None] = mapped_column(String(40), nullable=True)
    template_parameters: Mapped[Any] = mapped_column(JSON, nullable=True)
    external_error: Mapped[str | None] = mapped_column(String(EXTERNAL_ERROR_LENGTH), nullable=True)
    upstream_message_id: Mapped[str | None] = mapped_column(String(128), nullable=True, unique=True)
    # Price in millionths of `cost_currency`, set at acceptance and settled by the `pricing` of Meta's
    # status webhooks (API.md section 13); a failed message is reported as 0.
    cost_micros: Mapped[int] = mapped_column(Integer, default=0)
    cost_currency: Mapped[str] = mapped_column(String(3))
    # The category Meta charged, when its status webhook's `pricing` named another than the template's.
    cost_category: Mapped[str | None] = mapped_column(String(40), nullable=True)
    batch_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    # What Meta answered the send with when it did not simply accept it (`held_for_quality_assessment`
    # under template pacing, API.md section 14); cleared by the message's first status webhook.
    upstream_status: Mapped[str | None] = mapped_column(String(40), nullable=True)
    # Who wrote an outbound message that the app did not send: "meta_business_agent" for the replies
    # of Meta's AI agent, which arrive as echoes on the `standby` field (API.md section 14). Such
    # messages are not "sent through the API": not listed or readable there, and fire no events.
    sent_by: Mapped[str | None] = mapped_column(String(40), nullable=True)
    # The dashboard user who sent it (an agent's reply); empty for API and bulk sends.
    agent_user_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The request's status_callback, its secret encrypted (see events).
    status_callback: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # [{"status": "sent", "at": "...Z"}, ...]: each status once, in forward order.
    status_history: Mapped[list[dict[str, str]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# Every column of a message: what applying statuses reads (`MessageRecord`), in this order.
MESSAGE_COLUMNS = (
    "id",
    "account_id",
    "channel_id",
    "conversation_id",
    "direction",
    "phone_number",
    "user_id",
    "status",
    "sent_as",
    "text",
    "template_name",
    "template_language",
    "template_category",
    "template_parameters",
    "external_error",
    "upstream_message_id",
    "cost_micros",
    "cost_currency",
    "cost_category",
    "batch_id",
    "agent_user_id",
    "upstream_status",
    "sent_by",
    "status_callback",
    "status_history",
    "created_at",
    "updated_at",
)


class MessageRecord:
    """A message as Meta's statuses read and change it: its row's values as plain attributes, and the
    names of those changed since it was read (`changed`). Applying a batch of statuses loaded every
    message as an ORM object (an identity-map entry and an instrumented state each), about a third of
    applying it (docs/performance.md, "Status webhooks"); the changes are written by one Core
    statement anyway. The attributes are Message's, with the same Python types."""

    __slots__ = (*MESSAGE_COLUMNS, "changed")
    id: str
    account_id: int
    channel_id: int
    conversation_id: int
    direction: Direction
    phone_number: str | None
    user_id: str | None
    status: MessageStatus
    sent_as: SentAs | None
    text: str | None
    template_name: str | None
    template_language: str | None
    template_category: str | None
    template_parameters: Any
    external_error: str | None
    upstream_message_id: str | None
    cost_micros: int
    cost_currency: str
    cost_category: str | None
    batch_id: str | None
    agent_user_id: int | None
    upstream_status: str | None
    sent_by: str | None
    status_callback: dict[str, Any] | None
    status_history: list[dict[str, str]]
    created_at: datetime
    updated_at: datetime
    changed: set[str]

    def __init__(self, values: Sequence[Any]) -> None:
        """`values`: a row of the columns of MESSAGE_COLUMNS, in that order."""
        for name, value in zip(MESSAGE_COLUMNS, values, strict=True):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "changed", set())

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        self.changed.add(name)


class ParkedStatus(Base):
    """A Meta status for a wamid we do not know yet: applied when the send result brings that wamid."""

    __tablename__ = "parked_statuses"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    upstream_message_id: Mapped[str] = mapped_column(String(128), index=True)
    # The channel whose phone number the status came for: it applies to that channel's message only.
    # Empty on rows parked before it was kept; those match by wamid alone.
    channel_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Indexed for the purge of statuses no send claimed (messages/parked.py).
    received_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


@dataclass(frozen=True)
class BoundTemplate:
    template: Template
    values: dict[str, Value]  # text, and a media header's link (templates/variables.py)
    parameters: Any  # as the caller gave them, for the message record


@dataclass(frozen=True)
class PreparedSend:
    """A checked send, ready to be stored: everything the write transaction needs, nothing to look up."""

    message_id: str
    account_id: int
    channel_id: int
    # The number, or a user id (with its contact, when the gateway has seen it); one at least.
    phone_number: str | None
    sent_as: SentAs
    text: str | None
    template: BoundTemplate | None
    upstream_body: dict[str, Any]
    conversation_status: ConversationStatus | None
    status_callback: dict[str, Any] | None
    cost_micros: int
    currency: str
    priority: Priority = Priority.single
    batch_id: str | None = None
    user_id: str | None = None
    contact_id: int | None = None
    agent_user_id: int | None = None  # a dashboard user's reply
    # A validity period (API.md section 11): not handed to Meta by `expires_at`, it is never sent.
    validity_seconds: int | None = None
    expires_at: datetime | None = None
    # The request that accepted it, carried to the dispatcher's log line for its send.
    request_id: str | None = None
    # Who takes which events (the cached snapshot): `message_created` and `conversation_status_changed`
    # cost the send nothing when nobody does.
    subscriptions: Subscriptions = NO_SUBSCRIPTIONS

    @property
    def announced(self) -> bool:
        """Whether storing it writes events (message_created, conversation_status_changed)."""
        kinds = self.subscriptions.by_account.get(self.account_id, {})
        return EventKind.message_created in kinds or EventKind.conversation_status_changed in kinds


@dataclass(frozen=True)
class SentMessage:
    """A message sent through the API or a batch, with its conversation's status now."""

    message: Message
    conversation_status: ConversationStatus
    handled_by: str = HANDLED_BY_APP  # who holds the conversation (API.md section 14)


@dataclass(frozen=True)
class SendPreview:
    """What a send would be (its dry run): checked as a real one, nothing stored."""

    prepared: PreparedSend
    text: str  # what the customer would read: the text, or the template's header, body and footer
    window: Window


@dataclass(frozen=True)
class AcceptedSend:
    """A send accepted (its 201): stored, and on its way to Meta."""

    message_id: str
    sent_as: SentAs
