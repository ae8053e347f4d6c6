from __future__ import annotations

from fastapi import APIRouter, Query

from wagate.channels.service import channel_for_member, member_channels
from wagate.deps import GatewayDep, Member
from wagate.limits import Id
from wagate.templates import service
from wagate.templates.schemas import TemplateList, TemplateOut

router = APIRouter()


@router.get("/accounts/{account_id}/whatsapp/templates", response_model=TemplateList)
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
