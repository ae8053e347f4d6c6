from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response

from wagate.accounts.access import Administrator, GatewayDep
from wagate.events import service
from wagate.events.models import DeliveryState
from wagate.events.schemas import (
    DELIVERY_EXAMPLE,
    CreateWebhookRequest,
    UpdateWebhookRequest,
    delivery_view,
    webhook_view,
)
from wagate.http.limits import Id
from wagate.http.openapi import ADMINISTRATOR_REQUIRED, WEBHOOK_NOT_FOUND, errors
from wagate.http.responses import FastJSONResponse

router = APIRouter()
COMMON = (401, 403, 422, 503)
ADMIN_ONLY = "Another account, or not an administrator (`administrator_required`)"
ADMIN_CODES = {403: ADMINISTRATOR_REQUIRED, 404: WEBHOOK_NOT_FOUND}
NO_WEBHOOK = "No webhook with this id in the account (`webhook_not_found`)"
WEBHOOK_EXAMPLE: dict[str, Any] = {
    "id": 1,
    "url": "https://crm.example.com/wagate/events",
    "events": ["message_updated"],
    "enabled": True,
    "disabled_reason": None,
    "consecutive_failures": 0,
    "failing_since": None,
    "created_at": "2026-11-24T09:00:00Z",
}


def ok(description: str, example: Any) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"example": example}}}


@router.get(
    "/accounts/{account_id}/webhooks",
    summary="List webhooks",
    description="The account's webhooks: where events about its messages, conversations, batches and"
    " templates are posted, signed. Administrators only.",
    responses={
        200: ok("The webhooks", {"data": [WEBHOOK_EXAMPLE]}),
        **errors(*COMMON, codes=ADMIN_CODES, _403=ADMIN_ONLY),
    },
)
async def list_webhooks(gateway: GatewayDep, principal: Administrator) -> dict[str, Any]:
    async with gateway.db.read() as session:
        webhooks = await service.list_webhooks(session, account_id=principal.account_id)
    return {"data": [webhook_view(w) for w in webhooks]}


@router.post(
    "/accounts/{account_id}/webhooks",
    status_code=201,
    summary="Create a webhook",
    description="Add a URL that receives the events named in `events` (default `message_updated`). The"
    " answer holds the signing `secret` once; it is never shown again. Administrators only.",
    responses={
        201: ok(
            "The webhook, with its secret", {**WEBHOOK_EXAMPLE, "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZI"}
        ),
        **errors(
            *COMMON,
            413,
            codes=ADMIN_CODES,
            _403=ADMIN_ONLY,
            _422="Invalid request, or a URL that cannot be parsed or connected to (`invalid_url`)",
        ),
    },
)
async def create_webhook(
    body: Annotated[
        CreateWebhookRequest,
        Body(
            openapi_examples={
                "crm": {
                    "value": {
                        "url": "https://crm.example.com/wagate/events",
                        "events": ["message_updated", "batch_completed"],
                    }
                }
            }
        ),
    ],
    gateway: GatewayDep,
    principal: Administrator,
) -> FastJSONResponse:
    created = await service.add_webhook(
        gateway, account_id=principal.account_id, url=body.url, events=body.events, by=principal
    )
    return FastJSONResponse(webhook_view(created.webhook, secret=created.secret), status_code=201)


@router.delete(
    "/accounts/{account_id}/webhooks/{webhook_id}",
    status_code=204,
    summary="Delete a webhook",
    description="Remove a webhook; no more events are posted to it. Administrators only.",
    responses={
        204: {"description": "Deleted; no body"},
        **errors(*COMMON, 404, codes=ADMIN_CODES, _403=ADMIN_ONLY, _404=NO_WEBHOOK),
    },
)
async def delete_webhook(webhook_id: Id, gateway: GatewayDep, principal: Administrator) -> Response:
    await service.remove_webhook(
        gateway, account_id=principal.account_id, webhook_id=webhook_id, by=principal
    )
    return Response(status_code=204)


@router.patch(
    "/accounts/{account_id}/webhooks/{webhook_id}",
    summary="Change a webhook",
    description="Change a webhook's URL or events, or enable it again after it was disabled for failing"
    " (`enabled: true`). Only the fields given change. Administrators only.",
    responses={
        200: ok("The webhook", WEBHOOK_EXAMPLE),
        **errors(
            *COMMON,
            404,
            413,
            codes=ADMIN_CODES,
            _403=ADMIN_ONLY,
            _404=NO_WEBHOOK,
            _422="Invalid request, or a URL that cannot be parsed or connected to (`invalid_url`)",
        ),
    },
)
async def update_webhook(
    webhook_id: Id,
    body: Annotated[UpdateWebhookRequest, Body(openapi_examples={"enable": {"value": {"enabled": True}}})],
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
        by=principal,
    )
    return FastJSONResponse(webhook_view(webhook))


@router.get(
    "/accounts/{account_id}/webhooks/{webhook_id}/deliveries",
    operation_id="list_webhook_deliveries",
    summary="List a webhook's deliveries",
    description="The events posted (or being posted) to a webhook, newest first, each with every attempt:"
    " when, the status code, latency and error. Page with `before`. Administrators only.",
    responses={
        200: ok("The deliveries, newest first", {"data": [DELIVERY_EXAMPLE]}),
        **errors(*COMMON, 404, codes=ADMIN_CODES, _403=ADMIN_ONLY, _404=NO_WEBHOOK),
    },
)
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
    "/accounts/{account_id}/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    operation_id="redeliver_webhook_delivery",
    summary="Deliver an event again",
    description="Post a delivery's event to its webhook again now (for one the receiver lost or refused)."
    " Administrators only.",
    responses={
        202: ok("The delivery, queued again", {**DELIVERY_EXAMPLE, "state": "pending", "finished_at": None}),
        **errors(
            *COMMON,
            404,
            409,
            codes={**ADMIN_CODES, 409: ("webhook_disabled", "The webhook is disabled; enable it first.")},
            _403=ADMIN_ONLY,
            _404="No webhook or delivery with this id (`webhook_not_found`, `delivery_not_found`)",
            _409="The webhook is disabled; enable it first (`webhook_disabled`)",
        ),
    },
)
async def redeliver(
    webhook_id: Id, delivery_id: str, gateway: GatewayDep, principal: Administrator
) -> FastJSONResponse:
    delivery = await service.redeliver_now(
        gateway, account_id=principal.account_id, webhook_id=webhook_id, delivery_id=delivery_id
    )
    return FastJSONResponse(delivery_view(delivery), status_code=202)
