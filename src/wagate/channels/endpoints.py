from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from wagate.accounts.auth import Principal, account_member
from wagate.channels import service
from wagate.channels.schemas import ChannelList, ChannelOut

router = APIRouter()


@router.get("/accounts/{account_id}/whatsapp/channels", response_model=ChannelList)
async def list_channels(request: Request, principal: Principal = Depends(account_member)) -> ChannelList:
    async with request.app.state.db.read() as session:
        channels = await service.member_channels(session, principal=principal)
    return ChannelList(data=[ChannelOut.of(c) for c in channels])
