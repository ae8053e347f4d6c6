from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request
from sqlalchemy.orm import Session

from wagate.accounts.auth import Principal, account_member
from wagate.channels.service import channel_for_member
from wagate.conversations.service import find_conversation, window_of
from wagate.db import isoformat
from wagate.events import service as events
from wagate.events.schemas import delivery_view
from wagate.idempotency import service as idempotency
from wagate.idempotency.http import answer_once
from wagate.limits import Id
from wagate.messages import service
from wagate.messages.schemas import SendMessageRequest, SendMessageResponse
from wagate.outbox.models import ClaimedSend
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
    request: Request,
    channel_id: Id,
    phone_number: str = Query(...),
    principal: Principal = Depends(account_member),
) -> dict[str, Any]:
    number = normalize_phone_number(phone_number)
    async with request.app.state.db.read() as session:
        channel = await channel_for_member(session, principal=principal, channel_id=channel_id)
        conversation = await find_conversation(
            session, account_id=principal.account_id, channel_id=channel.id, phone_number=number
        )
    window = window_of(conversation.last_customer_message_at if conversation else None)
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
    principal: Principal = Depends(account_member),
    idempotency_key: str | None = Header(None),
) -> JSONResponse:
    state = request.app.state
    return await answer_once(
        request, principal, body, idempotency_key, lambda idem: _accept(state, principal, body, idem)
    )


async def _accept(
    state: Any, principal: Principal, body: SendMessageRequest, idem: idempotency.IdempotentRequest | None
) -> JSONResponse:
    prepared = await service.prepare_send(
        state.lookups, principal=principal, request=body, settings=state.settings, secret_box=state.secret_box
    )
    response = {"id": prepared.message_id, "sent_as": prepared.sent_as.value, "status": "sent"}
    dispatcher = state.dispatcher
    # The fast path: when this process sends for the channel and its window has room (a batch under
    # way takes none of it), the row is stored already claimed and the call starts right after the
    # commit, without a claim of its own.
    claim = dispatcher.prepare_claim(prepared.channel_id)

    def unit(session: Session) -> int:
        job_id = service.store_send(
            session, prepared, notify_others=not dispatcher.owns(prepared.channel_id), claim=claim
        )
        if idem is not None:
            idempotency.remember_response(
                session,
                idem,
                idempotency.StoredResponse(201, response),
                ttl_seconds=state.settings.idempotency_ttl_seconds,
            )
        return job_id

    job_id = await state.db.write(unit)
    if claim is not None:
        claim.started(ClaimedSend(job_id, prepared.message_id, prepared.upstream_body, 1, prepared.priority))
    else:
        dispatcher.wake(prepared.channel_id)
    if prepared.announced:
        dispatcher.wake_events()
    return JSONResponse(response, status_code=201)


@router.get("/accounts/{account_id}/whatsapp/messages/{message_id}", responses=ERRORS)
async def get_message(
    message_id: str, request: Request, principal: Principal = Depends(account_member)
) -> dict[str, Any]:
    async with request.app.state.db.read() as session:
        return await service.read_message(session, principal=principal, message_id=message_id)


@router.get("/accounts/{account_id}/whatsapp/messages/{message_id}/deliveries", responses=ERRORS)
async def get_callback_deliveries(
    message_id: str,
    request: Request,
    principal: Principal = Depends(account_member),
    limit: int = Query(50, ge=1, le=200),
) -> JSONResponse:
    """The message's status_callback deliveries with every attempt, newest first."""
    async with request.app.state.db.read() as session:
        await service.read_message(session, principal=principal, message_id=message_id)  # 404 / 403
        found = await events.list_deliveries(
            session, account_id=principal.account_id, message_id=message_id, limit=limit
        )
    return JSONResponse({"data": [delivery_view(d, a) for d, a in found]})
