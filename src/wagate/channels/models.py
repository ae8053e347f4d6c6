from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from wagate.core.db import utcnow
from wagate.core.tables import Base, UTCDateTime


class Channel(Base):
    """A WhatsApp inbox of the Cloud API type: one business phone number."""

    __tablename__ = "channels"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    provider: Mapped[str] = mapped_column(String(40), default="whatsapp_cloud")
    phone_number: Mapped[str] = mapped_column(String(32))
    phone_number_id: Mapped[str] = mapped_column(String(64), unique=True)
    waba_id: Mapped[str] = mapped_column(String(64))
    # Encrypted with the deployment's secret key (wagate.crypto); never stored or logged in clear.
    # Text: Meta's tokens have no published maximum, and the ciphertext is longer still.
    access_token_encrypted: Mapped[str] = mapped_column(Text)
    messages_per_second: Mapped[int] = mapped_column(Integer, default=80)
    templates_synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Set while Meta refuses the channel itself (its token, its account): its sends wait instead of
    # failing, the dashboard shows why, and a probe send resumes it once Meta takes sends again.
    paused_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    paused_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class ChannelMember(Base):
    """Inbox membership: a user may use a channel only as its member (spec section 5, rule 3)."""

    __tablename__ = "channel_members"

    channel_id: Mapped[int] = mapped_column(ForeignKey("channels.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
