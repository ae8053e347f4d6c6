from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Enum, ForeignKey, Index, Integer, SmallInteger, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from wagate.core.db import utcnow
from wagate.core.tables import Base, BigIntId, UTCDateTime


class EventKind(enum.StrEnum):
    """What an account webhook subscribes to."""

    message_updated = "message_updated"
    message_created = "message_created"
    conversation_status_changed = "conversation_status_changed"
    batch_completed = "batch_completed"
    template_updated = "template_updated"


class DeliveryKind(enum.StrEnum):
    """The `event` field of a delivered body: an account webhook's event, or a status_callback report."""

    message_updated = "message_updated"
    message_created = "message_created"
    conversation_status_changed = "conversation_status_changed"
    batch_completed = "batch_completed"
    template_updated = "template_updated"
    message_status = "message_status"


class DeliveryState(enum.StrEnum):
    pending = "pending"
    delivered = "delivered"
    failed = "failed"  # given up: 410, its retry window passed, or its endpoint was disabled


class Webhook(Base):
    """An account's endpoint for events (API.md section 8), signed with its own `whsec_` secret."""

    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(String(2000))
    events: Mapped[list[str]] = mapped_column(JSON)
    # Encrypted with the deployment's key: it must be read back to sign every delivery. Text: a
    # ciphertext is longer than its secret, and no limit of ours should decide where it fails.
    secret_encrypted: Mapped[str] = mapped_column(Text)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    disabled_reason: Mapped[str | None] = mapped_column(String(500), nullable=True)
    # The current run of failed attempts (reset by any success): what automatic disabling looks at.
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0)
    failing_since: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Delivery(Base):
    """One event for one endpoint: an account webhook, or a message's status_callback URL.

    Its id is the `webhook-id` header, the same on every attempt, so receivers can drop duplicates.
    The outbox row that sends it lives only while it is pending.
    """

    __tablename__ = "deliveries"
    __table_args__ = (
        Index("ix_deliveries_webhook", "webhook_id", "id"),
        Index("ix_deliveries_finished", "finished_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    # Exactly one of: the account webhook, or the callback's own URL (with its secret, encrypted).
    webhook_id: Mapped[int | None] = mapped_column(
        ForeignKey("webhooks.id", ondelete="CASCADE"), nullable=True
    )
    url: Mapped[str | None] = mapped_column(String(2000), nullable=True)
    secret_encrypted: Mapped[str | None] = mapped_column(Text, nullable=True)
    message_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    kind: Mapped[DeliveryKind] = mapped_column(Enum(DeliveryKind, native_enum=False, length=40))
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[DeliveryState] = mapped_column(
        Enum(DeliveryState, native_enum=False, length=16), default=DeliveryState.pending
    )
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class DeliveryAttempt(Base):
    """One HTTP attempt of a delivery, as the account sees it in `GET .../deliveries`."""

    __tablename__ = "delivery_attempts"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(ForeignKey("deliveries.id", ondelete="CASCADE"), index=True)
    attempted_at: Mapped[datetime] = mapped_column(UTCDateTime)
    status_code: Mapped[int | None] = mapped_column(SmallInteger, nullable=True)
    latency_ms: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(String(500), nullable=True)
    response: Mapped[str | None] = mapped_column(String(1000), nullable=True)  # its start only
    succeeded: Mapped[bool] = mapped_column(Boolean)
