from __future__ import annotations

from fastapi import APIRouter, Query

from wagate.accounts.access import GatewayDep, Member
from wagate.channels.service import channel_for_member, member_channels
from wagate.http.limits import Id
from wagate.http.openapi import CHANNEL_NOT_FOUND, errors
from wagate.templates import service
from wagate.templates.schemas import TemplateList, TemplateOut

router = APIRouter()


@router.get(
    "/accounts/{account_id}/whatsapp/templates",
    response_model=TemplateList,
    summary="List templates",
    description="The message templates of the channels the key's user may send from, as Meta last reported"
    " them (its template webhooks within seconds, its listing at each sync), with the `variables` a send's"
    " `template.parameters` fill. Only APPROVED templates can be sent. `quality` is Meta's rating (GREEN,"
    " YELLOW, RED, UNKNOWN), `pending_category` a recategorisation Meta announced and has not made yet"
    " (sends are priced by `category` until it does), `rejected_reason` why a REJECTED, PAUSED or DISABLED"
    " template is so. Every filter is optional and exact.",
    responses={
        200: {
            "description": "The templates",
            "content": {
                "application/json": {
                    "example": {
                        "data": [
                            {
                                "channel_id": 1,
                                "name": "otp_code",
                                "language": "en",
                                "category": "AUTHENTICATION",
                                "status": "APPROVED",
                                "quality": "GREEN",
                                "pending_category": None,
                                "rejected_reason": None,
                                "parameter_format": "POSITIONAL",
                                "variables": ["1"],
                                "components": [{"type": "BODY", "text": "{{1}} is your code."}],
                            },
                            {
                                "channel_id": 1,
                                "name": "order_update",
                                "language": "en",
                                "category": "UTILITY",
                                "status": "PAUSED",
                                "quality": "RED",
                                "pending_category": "MARKETING",
                                "rejected_reason": "Your WhatsApp message template has been paused"
                                " for 3 hours because it had issues.",
                                "parameter_format": "POSITIONAL",
                                "variables": ["1", "2"],
                                "components": [{"type": "BODY", "text": "Your order {{1}} is now {{2}}."}],
                            },
                        ]
                    }
                }
            },
        },
        **errors(
            401,
            403,
            404,
            422,
            503,
            codes={404: CHANNEL_NOT_FOUND},
            _403="Another account, or `channel_id` of an inbox the key's user is not a member of",
            _404="`channel_id` names no channel of the account",
        ),
    },
)
async def list_templates(
    gateway: GatewayDep,
    principal: Member,
    channel_id: Id | None = Query(None),
    name: str | None = Query(None),
    language: str | None = Query(None),
    category: str | None = Query(None),
    status: str | None = Query(None),
) -> TemplateList:
    async with gateway.db.read() as session:
        if channel_id is not None:
            channel_ids = [(await channel_for_member(session, principal=principal, channel_id=channel_id)).id]
        else:
            channel_ids = [c.id for c in await member_channels(session, principal=principal)]
        templates = await service.list_templates(
            session, channel_ids=channel_ids, name=name, language=language, category=category, status=status
        )
    return TemplateList(data=[TemplateOut.of(t) for t in templates])
