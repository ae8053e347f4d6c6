from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Response

from wagate.deps import Administrator, GatewayDep
from wagate.events import service
from wagate.events.models import DeliveryState
from wagate.events.schemas import CreateWebhookRequest, UpdateWebhookRequest, delivery_view, webhook_view
from wagate.limits import Id
from wagate.responses import FastJSONResponse

router = APIRouter()


@router.get("/accounts/{account_id}/webhooks")
async def list_webhooks(gateway: GatewayDep, principal: Administrator) -> dict[str, Any]:
    async with gateway.db.read() as session:
        webhooks = await service.list_webhooks(session, account_id=principal.account_id)
    return {"data": [webhook_view(w) for w in webhooks]}


@router.post("/accounts/{account_id}/webhooks", status_code=201)
async def create_webhook(
    body: CreateWebhookRequest, gateway: GatewayDep, principal: Administrator
) -> FastJSONResponse:
    created = await service.add_webhook(
        gateway, account_id=principal.account_id, url=body.url, events=body.events
    )
    return FastJSONResponse(webhook_view(created.webhook, secret=created.secret), status_code=201)


@router.delete("/accounts/{account_id}/webhooks/{webhook_id}", status_code=204)
async def delete_webhook(webhook_id: Id, gateway: GatewayDep, principal: Administrator) -> Response:
    await service.remove_webhook(gateway, account_id=principal.account_id, webhook_id=webhook_id)
    return Response(status_code=204)


@router.patch("/accounts/{account_id}/webhooks/{webhook_id}")
async def update_webhook(
    webhook_id: Id,
    body: UpdateWebhookRequest,
    gateway: GatewayDep,
    principal: Administrator,
) -> FastJSONResponse:
    webhook = await service.change_webhook(
        gateway,
        account_id=principal.account_id,
        webhook_id=webhook_id,
        url=body.url,
        events=body.events,
        enabled=body.enabled,
    )
    return FastJSONResponse(webhook_view(webhook))


@router.get("/accounts/{account_id}/webhooks/{webhook_id}/deliveries")
async def list_deliveries(
    webhook_id: Id,
    gateway: GatewayDep,
    principal: Administrator,
    state: DeliveryState | None = None,
    before: str | None = Query(None, max_length=40, description="a delivery id: list those older than it"),
    limit: int = Query(50, ge=1, le=200),
) -> FastJSONResponse:
    async with gateway.db.read() as session:
        found = await service.webhook_deliveries(
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
    webhook_id: Id, delivery_id: str, gateway: GatewayDep, principal: Administrator
) -> FastJSONResponse:
    delivery = await service.redeliver_now(
        gateway, account_id=principal.account_id, webhook_id=webhook_id, delivery_id=delivery_id
    )
    return FastJSONResponse(delivery_view(delivery), status_code=202)
