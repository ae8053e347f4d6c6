from __future__ import annotations

from fastapi import APIRouter

from wagate.accounts.access import GatewayDep, Member
from wagate.channels import service
from wagate.channels.schemas import ChannelList, ChannelOut
from wagate.http.openapi import errors

router = APIRouter()


@router.get(
    "/accounts/{account_id}/whatsapp/channels",
    response_model=ChannelList,
    summary="List channels",
    description="The account's WhatsApp numbers (channels) the key's user may send from: every channel for"
    " an administrator, the channels of their inboxes for an agent. `channel_id` is what sends name.",
    responses={
        200: {
            "description": "The channels",
            "content": {
                "application/json": {
                    "example": {
                        "data": [
                            {
                                "channel_id": 1,
                                "name": "Support",
                                "phone_number": "+994125550100",
                                "provider": "whatsapp_cloud",
                                "messages_per_second": 80,
                            }
                        ]
                    }
                }
            },
        },
        **errors(401, 403, 422, 503),
    },
)
async def list_channels(gateway: GatewayDep, principal: Member) -> ChannelList:
    async with gateway.db.read() as session:
        channels = await service.member_channels(session, principal=principal)
    return ChannelList(data=[ChannelOut.of(c) for c in channels])
