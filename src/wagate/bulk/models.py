from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Enum, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from wagate.core.db import utcnow
from wagate.core.tables import Base, BigIntId, UTCDateTime
from wagate.events.subscriptions import Subscriptions
from wagate.messages.models import BoundTemplate, PreparedSend


class BatchStatus(enum.StrEnum):
    processing = "processing"
    completed = "completed"  # every accepted recipient handed to the upstream, or failed


class Batch(Base):
    """One template sent to many numbers (API.md sections 6-7); each accepted recipient is a message."""

    __tablename__ = "batches"
    __table_args__ = (Index("ix_batches_expires_at", "expires_at"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    channel_id: Mapped[int] = mapped_column(ForeignKey("channels.id", ondelete="CASCADE"))
    template_name: Mapped[str] = mapped_column(String(512))
    template_language: Mapped[str] = mapped_column(String(20))
    template_category: Mapped[str | None] = mapped_column(String(40), nullable=True)
    status: Mapped[BatchStatus] = mapped_column(
        Enum(BatchStatus, native_enum=False, length=16), default=BatchStatus.processing
    )
    total: Mapped[int] = mapped_column(Integer)
    accepted: Mapped[int] = mapped_column(Integer)
    rejected: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class BatchRecipient(Base):
    """A recipient as the request gave it: its message, or why it was rejected."""

    __tablename__ = "batch_recipients"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    batch_id: Mapped[str] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)  # order in the request
    phone_number: Mapped[str] = mapped_column(String(64))  # E.164, or as given when invalid
    message_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    error: Mapped[str | None] = mapped_column(String(200), nullable=True)  # why rejected


@dataclass(frozen=True)
class PreparedBatch:
    batch_id: str
    account_id: int
    channel_id: int
    template: BoundTemplate
    sends: list[PreparedSend]
    # (phone number, message id, rejection) in request order, duplicates dropped
    recipients: list[tuple[str, str | None, str | None]]
    subscriptions: Subscriptions


@dataclass(frozen=True)
class RecipientState:
    phone_number: str
    message_id: str | None
    status: str  # pending (not yet handed to Meta), a message status, or rejected
    external_error: str | None


@dataclass(frozen=True)
class BatchReport:
    """A batch as it is now: its counts by state and its recipients in request order."""

    batch: Batch
    counts: dict[str, int]
    recipients: list[RecipientState]
