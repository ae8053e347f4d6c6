from __future__ import annotations

from fastapi import APIRouter

from wagate.channels import service
from wagate.channels.schemas import ChannelList, ChannelOut
from wagate.deps import GatewayDep, Member

router = APIRouter()


@router.get("/accounts/{account_id}/whatsapp/channels", response_model=ChannelList)
async def list_channels(gateway: GatewayDep, principal: Member) -> ChannelList:
    async with gateway.db.read() as session:
        channels = await service.member_channels(session, principal=principal)
    return ChannelList(data=[ChannelOut.of(c) for c in channels])
