from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from sqlalchemy.orm import Session

from wagate.accounts.auth import Principal, account_member
from wagate.events import service
from wagate.events.models import DeliveryState
from wagate.events.schemas import CreateWebhookRequest, UpdateWebhookRequest, delivery_view, webhook_view
from wagate.events.urls import check_url
from wagate.limits import Id
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

    view = await state.db.write(unit)
    state.lookups.forget_subscriptions()  # this process sees the new subscriber at once
    return FastJSONResponse(view, status_code=201)


@router.delete("/accounts/{account_id}/webhooks/{webhook_id}", status_code=204)
async def delete_webhook(
    webhook_id: Id, request: Request, principal: Principal = Depends(administrator)
) -> Response:
    def unit(session: Session) -> None:
        service.delete_webhook(session, account_id=principal.account_id, webhook_id=webhook_id)

    await request.app.state.db.write(unit)
    request.app.state.lookups.forget_subscriptions()
    return Response(status_code=204)


@router.patch("/accounts/{account_id}/webhooks/{webhook_id}")
async def update_webhook(
    webhook_id: Id,
    body: UpdateWebhookRequest,
    request: Request,
    principal: Principal = Depends(administrator),
) -> FastJSONResponse:
    state = request.app.state
    url = (
        None
        if body.url is None
        else await check_url(body.url, allow_private=state.settings.allow_private_urls)
    )

    def unit(session: Session) -> dict[str, Any]:
        webhook = service.update_webhook(
            session,
            account_id=principal.account_id,
            webhook_id=webhook_id,
            url=url,
            events=body.events,
            enabled=body.enabled,
        )
        return webhook_view(webhook)

    view = await state.db.write(unit)
    state.lookups.forget_subscriptions()
    return FastJSONResponse(view)


@router.get("/accounts/{account_id}/webhooks/{webhook_id}/deliveries")
async def list_deliveries(
    webhook_id: Id,
    request: Request,
    principal: Principal = Depends(administrator),
    state: DeliveryState | None = None,
    before: str | None = Query(None, max_length=40, description="a delivery id: list those older than it"),
    limit: int = Query(50, ge=1, le=200),
) -> FastJSONResponse:
    async with request.app.state.db.read() as session:
        await service.find_webhook(session, account_id=principal.account_id, webhook_id=webhook_id)
        found = await service.list_deliveries(
            session,
            account_id=principal.account_id,
            webhook_id=webhook_id,
            state=state,
            before=before,
            limit=limit,
        )
    return FastJSONResponse({"data": [delivery_view(d, a) for d, a in found]})


@router.post(
    "/accounts/{account_id}/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver", status_code=202
)
async def redeliver(
    webhook_id: Id, delivery_id: str, request: Request, principal: Principal = Depends(administrator)
) -> FastJSONResponse:
    state = request.app.state

    def unit(session: Session) -> dict[str, Any]:
        delivery = service.redeliver(
            session, account_id=principal.account_id, webhook_id=webhook_id, delivery_id=delivery_id
        )
        return delivery_view(delivery)

    view = await state.db.write(unit)
    state.dispatcher.wake_events()
    return FastJSONResponse(view, status_code=202)
