from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import Enum, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from wagate.db import Base, UTCDateTime, utcnow

CONTACT_NAME_LENGTH = 200


class ConversationStatus(enum.StrEnum):
    open = "open"
    pending = "pending"
    resolved = "resolved"


class Contact(Base):
    __tablename__ = "contacts"
    __table_args__ = (UniqueConstraint("account_id", "phone_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    phone_number: Mapped[str] = mapped_column(String(32))
    name: Mapped[str | None] = mapped_column(String(CONTACT_NAME_LENGTH), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Conversation(Base):
    """The thread between one channel and one contact, as agents see it in the dashboard."""

    __tablename__ = "conversations"
    __table_args__ = (UniqueConstraint("channel_id", "contact_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"), index=True)
    channel_id: Mapped[int] = mapped_column(ForeignKey("channels.id", ondelete="CASCADE"))
    contact_id: Mapped[int] = mapped_column(ForeignKey("contacts.id", ondelete="CASCADE"))
    status: Mapped[ConversationStatus] = mapped_column(Enum(ConversationStatus, native_enum=False, length=20))
    # The 24-hour window runs from the customer's last message.
    last_customer_message_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_activity_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
