from __future__ import annotations

from pydantic import BaseModel

from wagate.channels.models import Channel


class ChannelOut(BaseModel):
    channel_id: int
    name: str
    phone_number: str
    provider: str
    messages_per_second: int

    @classmethod
    def of(cls, channel: Channel) -> ChannelOut:
        return cls(
            channel_id=channel.id,
            name=channel.name,
            phone_number=channel.phone_number,
            provider=channel.provider,
            messages_per_second=channel.messages_per_second,
        )


class ChannelList(BaseModel):
    data: list[ChannelOut]
