from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Header, Query, Request

from wagate.channels.service import channel_for_member
from wagate.conversations.service import window_for
from wagate.db import isoformat
from wagate.deps import GatewayDep, Member
from wagate.events import service as events
from wagate.events.schemas import delivery_view
from wagate.idempotency import service as idempotency
from wagate.idempotency.http import answer_once
from wagate.limits import Id
from wagate.messages import service
from wagate.messages.schemas import SendMessageRequest, SendMessageResponse, message_view
from wagate.phones import normalize_phone_number
from wagate.responses import FastJSONResponse as JSONResponse

router = APIRouter()
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing, unknown or revoked API key"},
    403: {"description": "Another account, or not a member of the channel's inbox"},
    404: {"description": "Unknown channel or message"},
    422: {"description": "Invalid request; `error.code` says which rule"},
}


@router.get("/accounts/{account_id}/whatsapp/messages/window", responses=ERRORS)
async def check_window(
    gateway: GatewayDep,
    principal: Member,
    channel_id: Id,
    phone_number: str = Query(...),
) -> dict[str, Any]:
    number = normalize_phone_number(phone_number)
    async with gateway.db.read() as session:
        channel = await channel_for_member(session, principal=principal, channel_id=channel_id)
        window = await window_for(
            session, account_id=principal.account_id, channel_id=channel.id, recipient=number
        )
    return {
        "channel_id": channel.id,
        "phone_number": number,
        "open": window.open,
        "last_customer_message_at": isoformat(window.last_customer_message_at),
        "expires_at": isoformat(window.expires_at),
        "seconds_remaining": window.seconds_remaining,
    }


@router.post(
    "/accounts/{account_id}/whatsapp/messages",
    status_code=201,
    response_model=SendMessageResponse,
    responses={**ERRORS, 409: {"description": "Idempotency-Key in use"}},
)
async def send_message(
    body: SendMessageRequest,
    request: Request,
    gateway: GatewayDep,
    principal: Member,
    idempotency_key: str | None = Header(None),
) -> JSONResponse:
    path = request.url.path

    async def accept(idem: idempotency.IdempotentRequest | None) -> JSONResponse:
        response = await service.accept_send(gateway, principal=principal, request=body, idem=idem)
        return JSONResponse(response, status_code=201)

    return await answer_once(
        gateway.db, gateway.idempotency_in_flight, path, principal, body, idempotency_key, accept
    )


@router.get("/accounts/{account_id}/whatsapp/messages/{message_id}", responses=ERRORS)
async def get_message(message_id: str, gateway: GatewayDep, principal: Member) -> dict[str, Any]:
    async with gateway.db.read() as session:
        found = await service.read_message(session, principal=principal, message_id=message_id)
    return message_view(found.message, conversation_status=found.conversation_status.value)


@router.get("/accounts/{account_id}/whatsapp/messages/{message_id}/deliveries", responses=ERRORS)
async def get_callback_deliveries(
    message_id: str,
    gateway: GatewayDep,
    principal: Member,
    limit: int = Query(50, ge=1, le=200),
) -> JSONResponse:
    """The message's status_callback deliveries with every attempt, newest first."""
    async with gateway.db.read() as session:
        await service.read_message(session, principal=principal, message_id=message_id)  # 404 / 403
        found = await events.callback_deliveries(
            session, account_id=principal.account_id, message_id=message_id, limit=limit
        )
    return JSONResponse({"data": [delivery_view(d, a) for d, a in found]})
