from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from wagate.core.db import utcnow
from wagate.core.tables import Base, UTCDateTime


class Template(Base):
    """A message template as last synced from the channel's WhatsApp Business Account."""

    __tablename__ = "templates"
    __table_args__ = (UniqueConstraint("channel_id", "name", "language"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    channel_id: Mapped[int] = mapped_column(ForeignKey("channels.id", ondelete="CASCADE"), index=True)
    meta_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(512))
    language: Mapped[str] = mapped_column(String(20))
    category: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(40))
    parameter_format: Mapped[str] = mapped_column(String(20), default="POSITIONAL")
    # Meta's quality rating of the template (GREEN, YELLOW, RED, UNKNOWN), from its quality webhook.
    quality: Mapped[str | None] = mapped_column(String(20), nullable=True)
    # A recategorisation Meta announced but has not made yet (API.md section 14): shown, not priced.
    pending_category: Mapped[str | None] = mapped_column(String(40), nullable=True)
    # Why Meta rejected, paused or disabled it, as its status webhook said.
    rejected_reason: Mapped[str | None] = mapped_column(String(500), nullable=True)
    components: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    variables: Mapped[list[str]] = mapped_column(JSON)
    synced_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
