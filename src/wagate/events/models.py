from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import JSON, Boolean, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from wagate.db import Base, UTCDateTime, utcnow


class EventKind(enum.StrEnum):
    message_updated = "message_updated"
    message_created = "message_created"
    conversation_status_changed = "conversation_status_changed"


class Webhook(Base):
    """An account's endpoint for events (API.md section 8), signed with its own `whsec_` secret."""

    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(String(2000))
    events: Mapped[list[str]] = mapped_column(JSON)
    # Encrypted with the deployment's key: it must be read back to sign every delivery.
    secret_encrypted: Mapped[str] = mapped_column(String(500))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    disabled_reason: Mapped[str | None] = mapped_column(String(500), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
