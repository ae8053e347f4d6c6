from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Request

from wagate.accounts.access import Administrator, GatewayDep
from wagate.bulk import service
from wagate.bulk.schemas import SendBulkRequest, SendBulkResponse, accepted_batch_view, batch_view
from wagate.http.openapi import BATCH_NOT_FOUND, CHANNEL_NOT_FOUND, errors
from wagate.http.responses import FastJSONResponse as JSONResponse
from wagate.idempotency.http import answer_once
from wagate.idempotency.service import IdempotentRequest

router = APIRouter()
COMMON = (401, 403, 422, 503)
FORBIDDEN = (
    "Another account, not an administrator (`administrator_required`), or not a member of the channel's inbox"
)
BULK_EXAMPLE: dict[str, Any] = {
    "channel_id": 1,
    "template": {"name": "order_update", "language": "en"},
    "recipients": [
        {"phone_number": "+994501234567", "parameters": ["A-1001"]},
        {"phone_number": "+994501234568", "parameters": ["A-1002"]},
    ],
}


@router.post(
    "/accounts/{account_id}/whatsapp/bulk_messages",
    status_code=202,
    response_model=SendBulkResponse,
    operation_id="send_bulk_messages",
    summary="Send a template to many numbers",
    description="Queue one template for up to the bulk limit of recipients, each with its own parameters;"
    " answers 202 with the batch id at once. The messages are sent at the channel's pace behind single"
    " sends; `GET .../bulk_messages/{batch_id}` reports the batch. Administrators only.",
    responses={
        202: {
            "description": "The batch, accepted",
            "content": {
                "application/json": {
                    "example": {
                        "batch_id": "bat_01jdx3k6q8v2m4n5p6r7s8t9va",
                        "status": "processing",
                        "total": 2,
                        "accepted": 2,
                        "rejected": 0,
                    }
                }
            },
        },
        **errors(
            *COMMON,
            404,
            409,
            413,
            429,
            codes={404: CHANNEL_NOT_FOUND},
            _403=FORBIDDEN,
            _404="`channel_id` names no channel of the account",
            _429="The channel's bulk queue is full; see `Retry-After`",
        ),
    },
)
async def send_bulk(
    body: Annotated[SendBulkRequest, Body(openapi_examples={"order_update": {"value": BULK_EXAMPLE}})],
    request: Request,
    gateway: GatewayDep,
    principal: Administrator,
    idempotency_key: str | None = Header(None),
) -> JSONResponse:
    async def accept(idem: IdempotentRequest | None) -> JSONResponse:
        batch = await service.accept_batch(gateway, principal=principal, request=body, idem=idem)
        return JSONResponse(accepted_batch_view(batch), status_code=202)

    return await answer_once(gateway, request.url.path, principal, body, idempotency_key, accept)


@router.get(
    "/accounts/{account_id}/whatsapp/bulk_messages/{batch_id}",
    operation_id="get_bulk_message",
    summary="Get a bulk batch",
    description="A batch's progress: how many of its messages are queued, sent, delivered, read and failed,"
    " and what they cost. Batches are kept 7 days. Administrators only.",
    responses={
        200: {
            "description": "The batch",
            "content": {
                "application/json": {
                    "example": {
                        "batch_id": "bat_01jdx3k6q8v2m4n5p6r7s8t9va",
                        "channel_id": 1,
                        "template": {"name": "order_update", "language": "en", "category": "UTILITY"},
                        "status": "completed",
                        "created_at": "2026-11-24T09:00:00Z",
                        "completed_at": "2026-11-24T09:00:02Z",
                        "expires_at": "2026-12-01T09:00:00Z",
                        "total": 2,
                        "accepted": 2,
                        "rejected": 0,
                        "counts": {"delivered": 1, "failed": 1},
                        "recipients": [
                            {
                                "phone_number": "+994501234567",
                                "message_id": "msg_01jdx3k6q8v2m4n5p6r7s8t9va",
                                "status": "delivered",
                                "external_error": None,
                            }
                        ],
                    }
                }
            },
        },
        **errors(
            *COMMON,
            404,
            codes={404: BATCH_NOT_FOUND},
            _403=FORBIDDEN,
            _404="No batch with this id in the account (kept 7 days)",
        ),
    },
)
async def get_batch(batch_id: str, gateway: GatewayDep, principal: Administrator) -> JSONResponse:
    async with gateway.db.read() as session:
        report = await service.read_batch(session, principal=principal, batch_id=batch_id)
    return JSONResponse(batch_view(report))
