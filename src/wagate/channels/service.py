"""Channels a caller may use: of its account and with the caller as an inbox member."""

from __future__ import annotations

from sqlalchemy import exists, select
from sqlalchemy.ext.asyncio import AsyncSession

from wagate.accounts.auth import Principal
from wagate.channels.models import Channel, ChannelMember
from wagate.errors import ChannelNotFound, Forbidden


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
