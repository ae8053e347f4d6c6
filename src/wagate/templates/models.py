from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from wagate.db import Base, UTCDateTime, utcnow


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
    components: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    variables: Mapped[list[str]] = mapped_column(JSON)
    synced_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
