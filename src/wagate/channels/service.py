"""Channels a caller may use: of its account and with the caller as an inbox member; and the
inboxes' members, as administrators manage them (the dashboard's settings > Inboxes)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, delete, exists, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.accounts.actors import By, record_change
from wagate.accounts.auth import Principal
from wagate.accounts.models import DashboardSession, Role, User
from wagate.audit.models import SYSTEM, AuditAction
from wagate.channels.models import Channel, ChannelMember
from wagate.core.cache import Caches, Part, TTLCache
from wagate.core.db import utcnow
from wagate.core.errors import ChannelNotFound, Forbidden, UserNotFound
from wagate.core.security import hash_api_token
from wagate.runtime.gateway import Gateway

# A channel a caller may use, by (user, account, channel): a send checks it on every request. A refusal
# (404 / 403) is never cached.
CHANNELS_OF_CALLERS: Part[TTLCache[tuple[int, int, int], Channel]] = Part("channels of callers", TTLCache)
# The channel id of a business phone number id, None if there is none (Meta's webhooks name the
# number, several times for every message sent).
CHANNEL_OF_NUMBER: Part[TTLCache[str, int | None]] = Part("channel of a number", TTLCache)


async def member_channels(session: AsyncSession, *, principal: Principal) -> list[Channel]:
    rows = await session.scalars(
        select(Channel)
        .join(ChannelMember, ChannelMember.channel_id == Channel.id)
        .where(Channel.account_id == principal.account_id, ChannelMember.user_id == principal.user_id)
        .order_by(Channel.id)
    )
    return list(rows)


async def channel_for_member(session: AsyncSession, *, principal: Principal, channel_id: int) -> Channel:
    """The channel, or 404 when the account has none with this id, or 403 when not a member."""
    is_member = (
        exists()
        .where(ChannelMember.channel_id == Channel.id, ChannelMember.user_id == principal.user_id)
        .correlate(Channel)
    )
    row = (
        await session.execute(
            select(Channel, is_member).where(
                Channel.id == channel_id, Channel.account_id == principal.account_id
            )
        )
    ).one_or_none()
    if row is None:
        raise ChannelNotFound()
    if not row[1]:
        raise Forbidden("The API key's user is not a member of this channel's inbox.")
    channel: Channel = row[0]
    return channel


async def channel_for_caller(caches: Caches, principal: Principal, channel_id: int) -> Channel:
    """`channel_for_member`, answered from the process's cache."""

    async def load() -> Channel:
        async with caches.db.read() as session:
            return await channel_for_member(session, principal=principal, channel_id=channel_id)

    key = (principal.user_id, principal.account_id, channel_id)
    return await caches[CHANNELS_OF_CALLERS].get_or_load(key, load)


async def channel_id_for_number(caches: Caches, phone_number_id: str) -> int | None:
    """The id of the channel with this business phone number id, None if there is none."""

    async def load() -> int | None:
        async with caches.db.read() as session:
            found: int | None = await session.scalar(
                select(Channel.id).where(Channel.phone_number_id == phone_number_id)
            )
        return found

    return await caches[CHANNEL_OF_NUMBER].get_or_load(phone_number_id, load)


# --- inbox members, as administrators manage them --------------------------------------------------


@dataclass(frozen=True)
class InboxMember:
    user_id: int
    name: str
    email: str
    role: Role


@dataclass(frozen=True)
class Inbox:
    """A channel of the account with its members (by name)."""

    channel: Channel
    members: list[InboxMember]


@dataclass(frozen=True)
class InboxPage:
    rows: list[Inbox]
    next_after: int | None  # the id to ask `after` for the next page, None on the last


async def account_channels(
    session: AsyncSession, *, principal: Principal, after_id: int | None = None, limit: int = 50
) -> tuple[list[Channel], int | None]:
    """Every channel of the principal's account (administrators only), by id, `limit` at a time, and
    the `after` of the next page (None on the last)."""
    principal.require_administrator()
    query = select(Channel).where(Channel.account_id == principal.account_id)
    if after_id is not None:
        query = query.where(Channel.id > after_id)
    found = list(await session.scalars(query.order_by(Channel.id).limit(limit + 1)))
    return found[:limit], found[limit - 1].id if len(found) > limit else None


async def account_inboxes(
    session: AsyncSession, *, principal: Principal, after_id: int | None = None, limit: int = 20
) -> InboxPage:
    """The account's channels with their members (administrators only), a page at a time."""
    channels, next_after = await account_channels(
        session, principal=principal, after_id=after_id, limit=limit
    )
    members: dict[int, list[InboxMember]] = {channel.id: [] for channel in channels}
    rows = await session.execute(
        select(ChannelMember.channel_id, User.id, User.name, User.email, User.role)
        .join(User, User.id == ChannelMember.user_id)
        .where(ChannelMember.channel_id.in_(list(members)))
        .order_by(User.name, User.id)
    )
    for channel_id, user_id, name, email, role in rows:
        members[channel_id].append(InboxMember(user_id, name, email, Role(role)))
    return InboxPage([Inbox(channel, members[channel.id]) for channel in channels], next_after)


def _channel_and_user(session: Session, *, account_id: int, channel_id: int, user_id: int) -> tuple[str, str]:
    """Both belong to the account (404 `channel_not_found` / `user_not_found` otherwise): the channel's
    name and the user's email, for the audit log."""
    channel_name = session.scalar(
        select(Channel.name).where(Channel.id == channel_id, Channel.account_id == account_id)
    )
    if channel_name is None:
        raise ChannelNotFound()
    email = session.scalar(select(User.email).where(User.id == user_id, User.account_id == account_id))
    if email is None:
        raise UserNotFound()
    return channel_name, email


def record_membership(
    session: Session,
    by: By,
    *,
    account_id: int,
    channel_id: int,
    user_id: int,
    added: bool,
    channel_name: str,
    email: str,
) -> None:
    """The audit entry of a user added to (or removed from) a channel's inbox."""
    record_change(
        session,
        by,
        account_id=account_id,
        action=AuditAction.membership_added if added else AuditAction.membership_removed,
        target_type="channel",
        target_id=channel_id,
        changes={"channel": channel_name, "user_id": user_id, "email": email},
    )


async def add_inbox_member(gateway: Gateway, *, principal: Principal, channel_id: int, user_id: int) -> bool:
    """Make a user of the account a member of the channel's inbox (administrators only); True when
    added, False when it was a member already. From then on the user's keys and dashboard may use the
    channel (a refusal is never cached, so at once in every process)."""
    principal.require_administrator()

    def unit(session: Session) -> bool:
        names = _channel_and_user(
            session, account_id=principal.account_id, channel_id=channel_id, user_id=user_id
        )
        member = session.get(ChannelMember, (channel_id, user_id))
        if member is not None:
            return False
        session.add(ChannelMember(channel_id=channel_id, user_id=user_id))
        session.flush()
        record_membership(
            session,
            principal,
            account_id=principal.account_id,
            channel_id=channel_id,
            user_id=user_id,
            added=True,
            channel_name=names[0],
            email=names[1],
        )
        return True

    added: bool = await gateway.db.write(unit)
    return added


async def remove_inbox_member(
    gateway: Gateway, *, principal: Principal, channel_id: int, user_id: int
) -> bool:
    """Take a user out of the channel's inbox (administrators only); True when removed, False when it
    was no member. The user's keys are refused on the channel at once by this process (its cached
    right to the channel dropped) and by the others within the cache's 5 s."""
    principal.require_administrator()

    def unit(session: Session) -> bool:
        names = _channel_and_user(
            session, account_id=principal.account_id, channel_id=channel_id, user_id=user_id
        )
        removed = session.execute(
            delete(ChannelMember).where(
                ChannelMember.channel_id == channel_id, ChannelMember.user_id == user_id
            )
        )
        if not removed.rowcount:  # type: ignore[attr-defined]
            return False
        record_membership(
            session,
            principal,
            account_id=principal.account_id,
            channel_id=channel_id,
            user_id=user_id,
            added=False,
            channel_name=names[0],
            email=names[1],
        )
        return True

    removed: bool = await gateway.db.write(unit)
    gateway.caches[CHANNELS_OF_CALLERS].discard((user_id, principal.account_id, channel_id))
    return removed


async def paused_channels(session: AsyncSession, *, principal: Principal) -> list[Channel]:
    """The caller's inboxes whose sends wait because Meta refuses the channel (its token, its account)."""
    rows = await session.scalars(
        select(Channel)
        .join(ChannelMember, ChannelMember.channel_id == Channel.id)
        .where(
            Channel.account_id == principal.account_id,
            ChannelMember.user_id == principal.user_id,
            Channel.paused_reason.is_not(None),
        )
        .order_by(Channel.id)
    )
    return list(rows)


# --- a channel paused while Meta refuses it, and resumed ------------------------------------------


def pause_channel(session: Session, channel_id: int, *, reason: str, at: datetime, by: By = SYSTEM) -> bool:
    """Mark the channel paused with Meta's reason (the first time only: `paused_at` says since when);
    True, and an audit entry, when it was not paused yet."""
    row = session.execute(
        update(Channel)
        .where(Channel.id == channel_id, Channel.paused_reason.is_(None))
        .values(paused_reason=reason[:1000], paused_at=at)
        .returning(Channel.account_id)
    ).one_or_none()
    if row is None:
        return False
    record_change(
        session,
        by,
        account_id=row[0],
        action=AuditAction.channel_paused,
        target_type="channel",
        target_id=channel_id,
        changes={"reason": reason[:500]},
    )
    return True


def resume_channel(session: Session, channel_id: int, *, by: By = SYSTEM, why: str | None = None) -> bool:
    """Take the pause off the channel; True, and an audit entry, when it was paused."""
    row = session.execute(
        update(Channel)
        .where(Channel.id == channel_id, Channel.paused_reason.is_not(None))
        .values(paused_reason=None, paused_at=None)
        .returning(Channel.account_id)
    ).one_or_none()
    if row is None:
        return False
    changes = {"why": why} if why else {}
    record_change(
        session,
        by,
        account_id=row[0],
        action=AuditAction.channel_resumed,
        target_type="channel",
        target_id=channel_id,
        changes=changes,
    )
    return True


# --- what a dashboard session may see, asked again while its live stream runs ---------------------


@dataclass(frozen=True)
class SessionInboxes:
    """What a dashboard session may still see: until when, and the ids of its user's inboxes."""

    user_id: int
    expires_at: datetime
    inbox_ids: frozenset[int]


async def session_inboxes(gateway: Gateway, token: str) -> SessionInboxes | None:
    """The session's end and its user's inboxes (channels of the user's account they are a member
    of), in one query; None when the session is unknown, signed out or expired. The live stream
    asks again every few seconds (wagate.dashboard.live_stream, LIVE_RECHECK_SECONDS)."""
    inbox = and_(Channel.id == ChannelMember.channel_id, Channel.account_id == User.account_id)
    async with gateway.db.read() as session:
        rows = (
            await session.execute(
                select(User.id, DashboardSession.expires_at, Channel.id)
                .join(DashboardSession, DashboardSession.user_id == User.id)
                .outerjoin(ChannelMember, ChannelMember.user_id == User.id)
                .outerjoin(Channel, inbox)
                .where(
                    DashboardSession.token_hash == hash_api_token(token),
                    DashboardSession.expires_at > utcnow(),
                )
            )
        ).all()
    if not rows:
        return None
    inbox_ids = frozenset(row[2] for row in rows if row[2] is not None)
    return SessionInboxes(rows[0][0], rows[0][1], inbox_ids)
