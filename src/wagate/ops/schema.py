"""Imports every model so that `Base.metadata` is complete (Alembic and tests use this)."""

from wagate.accounts.models import Account, ApiKey, Role, User
from wagate.audit.models import AuditEntry
from wagate.bulk.models import Batch, BatchRecipient, BatchStatus
from wagate.channels.models import Channel, ChannelMember
from wagate.conversations.models import Contact, Conversation, ConversationStatus
from wagate.core.tables import Base
from wagate.events.models import Delivery, DeliveryAttempt, EventKind, Webhook
from wagate.idempotency.models import IdempotencyKey
from wagate.messages.models import Direction, Message, MessageStatus, ParkedStatus, SentAs
from wagate.outbox.dead_letters import DeadLetter
from wagate.outbox.models import JobKind, JobState, OutboxJob, Priority
from wagate.templates.models import Template

__all__ = [
    "Account",
    "ApiKey",
    "AuditEntry",
    "Base",
    "Batch",
    "BatchRecipient",
    "BatchStatus",
    "Channel",
    "ChannelMember",
    "Contact",
    "Conversation",
    "ConversationStatus",
    "DeadLetter",
    "Delivery",
    "DeliveryAttempt",
    "Direction",
    "EventKind",
    "IdempotencyKey",
    "JobKind",
    "JobState",
    "Message",
    "MessageStatus",
    "OutboxJob",
    "ParkedStatus",
    "Priority",
    "Role",
    "SentAs",
    "Template",
    "User",
    "Webhook",
]
