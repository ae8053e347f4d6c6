"""The audit log: who changed what of an account's keys, webhooks, inbox members and channels, and when."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from wagate.core.db import utcnow
from wagate.core.tables import Base, BigIntId, UTCDateTime


class Via(enum.StrEnum):
    """How the actor acted."""

    api_key = "api_key"  # a request with an API key (its name is kept)
    dashboard = "dashboard"  # a signed-in dashboard session
    cli = "cli"  # an operator's command (`wagate secrets rotate`)
    provisioning = "provisioning"  # `wagate provision FILE.json`
    system = "system"  # the gateway itself (a webhook disabled for failing, a channel Meta refuses)


class AuditAction(enum.StrEnum):
    api_key_created = "api_key.created"
    api_key_revoked = "api_key.revoked"
    api_key_updated = "api_key.updated"  # provisioning: its token replaced, or un-revoked
    webhook_created = "webhook.created"
    webhook_updated = "webhook.updated"
    webhook_deleted = "webhook.deleted"
    webhook_enabled = "webhook.enabled"
    webhook_disabled = "webhook.disabled"
    membership_added = "membership.added"
    membership_removed = "membership.removed"
    channel_created = "channel.created"
    channel_updated = "channel.updated"
    channel_paused = "channel.paused"
    channel_resumed = "channel.resumed"
    secrets_rotated = "secrets.rotated"


@dataclass(frozen=True)
class Actor:
    """Who made a change: a user (through an API key, or signed in to the dashboard), or an operator's
    command, or the gateway itself. Email and key name are copied: the record outlives them."""

    via: Via
    user_id: int | None = None
    email: str | None = None
    api_key_id: int | None = None
    api_key_name: str | None = None


# What an entry says of a secret (a token, a signing secret): that it changed, never its value.
SECRET_SET = "set"  # noqa: S105 - a word, no secret
SECRET_REPLACED = "replaced"  # noqa: S105 - a word, no secret

CLI = Actor(Via.cli)
PROVISIONING = Actor(Via.provisioning)
SYSTEM = Actor(Via.system)


class AuditEntry(Base):
    """One change, written in the transaction that made it. `changes` says what changed, never a
    secret's value (a new token or secret shows as "replaced")."""

    __tablename__ = "audit_log"
    __table_args__ = (
        Index("ix_audit_log_account", "account_id", "id"),
        Index("ix_audit_log_account_action", "account_id", "action", "id"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    actor_via: Mapped[str] = mapped_column(String(20))
    # No foreign keys: a user or key deleted later leaves its changes on record.
    actor_user_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    actor_email: Mapped[str | None] = mapped_column(String(320), nullable=True)
    actor_api_key_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    actor_api_key_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    action: Mapped[str] = mapped_column(String(40))
    target_type: Mapped[str] = mapped_column(String(40))
    target_id: Mapped[str] = mapped_column(String(64))
    changes: Mapped[dict[str, Any]] = mapped_column(JSON)
