from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Header, Request

from wagate.bulk import service
from wagate.bulk.schemas import SendBulkRequest, SendBulkResponse, batch_view
from wagate.deps import Administrator, GatewayDep
from wagate.idempotency.http import answer_once
from wagate.idempotency.service import IdempotentRequest
from wagate.responses import FastJSONResponse as JSONResponse

router = APIRouter()
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing, unknown or revoked API key"},
    403: {"description": "Another account, not an administrator, or not a member of the channel's inbox"},
    404: {"description": "Unknown channel or batch (batches are kept 7 days)"},
    422: {"description": "Invalid request; `error.code` says which rule"},
}


@router.post(
    "/accounts/{account_id}/whatsapp/bulk_messages",
    status_code=202,
    response_model=SendBulkResponse,
    responses={
        **ERRORS,
        409: {"description": "Idempotency-Key in use"},
        429: {"description": "The channel's bulk queue is full; see Retry-After"},
    },
)
async def send_bulk(
    body: SendBulkRequest,
    request: Request,
    gateway: GatewayDep,
    principal: Administrator,
    idempotency_key: str | None = Header(None),
) -> JSONResponse:
    async def accept(idem: IdempotentRequest | None) -> JSONResponse:
        response = await service.accept_batch(gateway, principal=principal, request=body, idem=idem)
        return JSONResponse(response, status_code=202)

    return await answer_once(
        gateway.db, gateway.idempotency_in_flight, request.url.path, principal, body, idempotency_key, accept
    )


@router.get("/accounts/{account_id}/whatsapp/bulk_messages/{batch_id}", responses=ERRORS)
async def get_batch(batch_id: str, gateway: GatewayDep, principal: Administrator) -> JSONResponse:
    async with gateway.db.read() as session:
        report = await service.read_batch(session, principal=principal, batch_id=batch_id)
    return JSONResponse(batch_view(report))
