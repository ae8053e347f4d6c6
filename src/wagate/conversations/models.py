from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Boolean, Enum, ForeignKey, Index, Integer, String, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from wagate.conversations.search import CONTACT_KEY_LENGTH
from wagate.core.db import utcnow
from wagate.core.tables import Base, UTCDateTime

CONTACT_NAME_LENGTH = 200
# Meta's business-scoped user ids: a country code, a dot, alphanumerics (API.md section 13).
USER_ID_LENGTH = 64
USERNAME_LENGTH = 100
PHONE_NUMBER_LENGTH = 32
# Who answers the customer (`Conversation.handled_by`, API.md section 14): the app (the gateway's
# users) or Meta's AI agent, whose conversations Meta sends on the `standby` field.
HANDLED_BY_APP = "app"
HANDLED_BY_AGENT = "meta_business_agent"
# The last message's text as the conversation list shows it (a preview: the thread has the whole),
# and its folded form that search reads (conversations/search.py; folding may lengthen it a little).
LAST_MESSAGE_LENGTH = 200
LAST_MESSAGE_KEY_LENGTH = 250
TEMPLATE_NAME_LENGTH = 512


class ConversationStatus(enum.StrEnum):
    open = "open"
    pending = "pending"
    resolved = "resolved"


class Contact(Base):
    """A customer of the account: known by phone number, by Meta's user ids, or both (API.md section 13).

    A customer who adopted a username may never show their number: then `phone_number` is empty and
    `CustomerId` rows name them. Two customers of one number cannot exist (unique per account)."""

    __tablename__ = "contacts"
    __table_args__ = (UniqueConstraint("account_id", "phone_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    phone_number: Mapped[str | None] = mapped_column(String(PHONE_NUMBER_LENGTH), nullable=True)
    # The profile name and the username as Meta last showed them.
    name: Mapped[str | None] = mapped_column(String(CONTACT_NAME_LENGTH), nullable=True)
    username: Mapped[str | None] = mapped_column(String(USERNAME_LENGTH), nullable=True)
    # Name and username folded for the conversation list's search (conversations/search.py), written
    # with them (`learn_customers`); a number is searched by its digits in `phone_number`.
    search_key: Mapped[str | None] = mapped_column(String(CONTACT_KEY_LENGTH), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class CustomerId(Base):
    """A business-scoped user id (BSUID) of a customer. Meta scopes it to a business, so a customer
    reached through channels of two businesses has two of them; each names exactly one contact."""

    __tablename__ = "customer_ids"
    __table_args__ = (UniqueConstraint("account_id", "user_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id", ondelete="CASCADE"))
    user_id: Mapped[str] = mapped_column(String(USER_ID_LENGTH))
    parent_user_id: Mapped[str | None] = mapped_column(String(USER_ID_LENGTH), nullable=True)
    # The user id the customer moved to (Meta's `user_changed_user_id`): sends by this one go there.
    replaced_by: Mapped[str | None] = mapped_column(String(USER_ID_LENGTH), nullable=True)
    contact_id: Mapped[int] = mapped_column(ForeignKey("contacts.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class MarketingPreference(Base):
    """A customer's stop (or resume) of marketing messages from a channel, from Meta's
    `user_preferences` webhook: while stopped, MARKETING templates to them are refused."""

    __tablename__ = "marketing_preferences"
    __table_args__ = (UniqueConstraint("channel_id", "contact_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    channel_id: Mapped[int] = mapped_column(ForeignKey("channels.id", ondelete="CASCADE"))
    contact_id: Mapped[int] = mapped_column(ForeignKey("contacts.id", ondelete="CASCADE"), index=True)
    stopped: Mapped[bool] = mapped_column(Boolean)
    # Meta's time of the choice: an older webhook delivered late does not undo a newer choice.
    changed_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Conversation(Base):
    """The thread between one channel and one contact, as agents see it in the dashboard."""

    __tablename__ = "conversations"
    __table_args__ = (
        UniqueConstraint("channel_id", "contact_id"),
        # The dashboard's list, newest activity first, paged by (last_activity_at, id): of all the
        # user's inboxes (read in order, other inboxes skipped), or of one inbox.
        Index("ix_conversations_account_list", "account_id", "status", "last_activity_at", "id"),
        Index("ix_conversations_inbox_list", "channel_id", "status", "last_activity_at", "id"),
        # "Needs reply": the conversations whose customer waits, longest first, of every status. Only
        # those are indexed: a few among many, and a reply or an answer leaves the index again.
        Index(
            "ix_conversations_waiting",
            "account_id",
            "waiting_since",
            "id",
            sqlite_where=text("waiting_since IS NOT NULL"),
            postgresql_where=text("waiting_since IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # Indexed by ix_conversations_account_list, which starts with it. Its channel's account, and checked
    # (and deleted) through the channel (migration 0016).
    account_id: Mapped[int] = mapped_column(Integer)
    channel_id: Mapped[int] = mapped_column(ForeignKey("channels.id", ondelete="CASCADE"))
    contact_id: Mapped[int] = mapped_column(ForeignKey("contacts.id", ondelete="CASCADE"))
    status: Mapped[ConversationStatus] = mapped_column(Enum(ConversationStatus, native_enum=False, length=20))
    # Who answers the customer: "app" (the gateway's users) or "meta_business_agent" while Meta's AI
    # agent holds the conversation (its traffic on the `standby` field, API.md section 14).
    handled_by: Mapped[str] = mapped_column(String(30), server_default=HANDLED_BY_APP)
    # The 24-hour window runs from the customer's last message.
    last_customer_message_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_activity_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # The last message, kept here where messages are written so that the list is one query a page
    # (conversations/last_message.py, `LastMessage`): its preview, folded for search, who wrote it
    # (`customer`, `agent`, `api`, `template`, `meta_business_agent`), the template's name, the agent.
    last_message_text: Mapped[str | None] = mapped_column(String(LAST_MESSAGE_LENGTH), nullable=True)
    last_message_key: Mapped[str | None] = mapped_column(String(LAST_MESSAGE_KEY_LENGTH), nullable=True)
    last_message_from: Mapped[str | None] = mapped_column(String(30), nullable=True)
    last_message_author: Mapped[str | None] = mapped_column(String(TEMPLATE_NAME_LENGTH), nullable=True)
    last_message_agent_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Since when the customer waits for an answer: their first message after the last reply to them
    # (Meta's time); empty once answered. What ends waiting: `ENDS_WAITING` in last_message.py.
    waiting_since: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


# The window's warnings: amber under 4 hours left, red under 1 (issue 46).
WINDOW_CLOSING_SECONDS = 4 * 3600
WINDOW_URGENT_SECONDS = 3600


@dataclass(frozen=True)
class Window:
    last_customer_message_at: datetime | None
    expires_at: datetime | None
    now: datetime

    @property
    def open(self) -> bool:
        return self.expires_at is not None and self.expires_at > self.now

    @property
    def seconds_remaining(self) -> int:
        if not self.open or self.expires_at is None:
            return 0
        return int((self.expires_at - self.now).total_seconds())

    @property
    def state(self) -> str:
        """ "open", "closing" (under 4 hours left: a reply should go now) or "closed" (templates
        only), as the dashboard marks it (`data-window`, API.md section 12)."""
        if not self.open:
            return "closed"
        return "closing" if self.seconds_remaining < WINDOW_CLOSING_SECONDS else "open"

    @property
    def urgent(self) -> bool:
        """Under an hour left: the last chance to answer without a template."""
        return self.open and self.seconds_remaining < WINDOW_URGENT_SECONDS

    @property
    def closing_at(self) -> datetime | None:
        """When the state turns "closing": a page counting down on its own changes at these times."""
        return self.expires_at - timedelta(seconds=WINDOW_CLOSING_SECONDS) if self.expires_at else None

    @property
    def urgent_at(self) -> datetime | None:
        return self.expires_at - timedelta(seconds=WINDOW_URGENT_SECONDS) if self.expires_at else None
