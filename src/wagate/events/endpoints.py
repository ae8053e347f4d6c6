from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy.orm import Session

from wagate.accounts.auth import Principal, account_member
from wagate.events import service
from wagate.events.schemas import CreateWebhookRequest, webhook_view
from wagate.events.urls import check_url
from wagate.responses import FastJSONResponse

router = APIRouter()


def administrator(principal: Principal = Depends(account_member)) -> Principal:
    principal.require_administrator()
    return principal


@router.get("/accounts/{account_id}/webhooks")
async def list_webhooks(request: Request, principal: Principal = Depends(administrator)) -> dict[str, Any]:
    async with request.app.state.db.read() as session:
        webhooks = await service.list_webhooks(session, account_id=principal.account_id)
    return {"data": [webhook_view(w) for w in webhooks]}


@router.post("/accounts/{account_id}/webhooks", status_code=201)
async def create_webhook(
    body: CreateWebhookRequest, request: Request, principal: Principal = Depends(administrator)
) -> FastJSONResponse:
    state = request.app.state
    url = await check_url(body.url, allow_private=state.settings.allow_private_urls)
    secret = service.new_secret()

    def unit(session: Session) -> dict[str, Any]:
        webhook = service.create_webhook(
            session,
            account_id=principal.account_id,
            url=url,
            events=body.events,
            secret=secret,
            box=state.secret_box,
        )
        return webhook_view(webhook, secret=secret)

    return FastJSONResponse(await state.db.write(unit), status_code=201)


@router.delete("/accounts/{account_id}/webhooks/{webhook_id}", status_code=204)
async def delete_webhook(
    webhook_id: int, request: Request, principal: Principal = Depends(administrator)
) -> Response:
    def unit(session: Session) -> None:
        service.delete_webhook(session, account_id=principal.account_id, webhook_id=webhook_id)

    await request.app.state.db.write(unit)
    return Response(status_code=204)
