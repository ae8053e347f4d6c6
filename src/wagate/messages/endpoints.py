from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Request

from wagate.accounts.access import GatewayDep, Member
from wagate.channels.service import channel_for_member
from wagate.conversations.service import window_for
from wagate.core.db import isoformat
from wagate.core.phones import normalize_phone_number
from wagate.events import service as events
from wagate.events.schemas import DELIVERY_EXAMPLE, delivery_view
from wagate.http.limits import MAX_ID, Id
from wagate.http.openapi import CHANNEL_NOT_FOUND, MESSAGE_NOT_FOUND, errors
from wagate.http.responses import FastJSONResponse as JSONResponse
from wagate.messages import queries, service
from wagate.messages.api_examples import DRY_RUN_EXAMPLE, MESSAGE_EXAMPLE, SEND_EXAMPLES
from wagate.messages.models import MessageStatus
from wagate.messages.schemas import (
    MessageListOut,
    SendMessageRequest,
    SendMessageResponse,
    message_view,
    preview_view,
)
from wagate.messages.send_fast import accept_once

router = APIRouter()
COMMON = (401, 403, 422, 503)
NOT_FOUND = {"_403": "Another account, or not a member of the channel's inbox"}


@router.get(
    "/accounts/{account_id}/whatsapp/messages/window",
    summary="Check the customer service window",
    description="Whether the 24-hour customer service window with a number is open on a channel (free-form"
    " text may be sent only while it is), when the customer last wrote, and when it closes.",
    responses={
        200: {
            "description": "The window",
            "content": {
                "application/json": {
                    "example": {
                        "channel_id": 1,
                        "phone_number": "+994501234567",
                        "open": True,
                        "last_customer_message_at": "2026-11-24T09:15:00Z",
                        "expires_at": "2026-11-25T09:15:00Z",
                        "seconds_remaining": 86100,
                    }
                }
            },
        },
        **errors(
            *COMMON,
            404,
            codes={404: CHANNEL_NOT_FOUND},
            _404="`channel_id` names no channel of the account",
            **NOT_FOUND,
        ),
    },
)
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
    summary="Send a message",
    description="Send a template (an OTP, a notification) or, in the customer's 24-hour window, free-form"
    " text, to one number. Answers 201 with the message, queued; its status then moves through `sent`,"
    " `delivered` and `read` (or `failed`), which `GET .../messages/{message_id}`, the `status_callback`"
    " and webhooks report. With an `Idempotency-Key` a retry answers the first answer again.",
    responses={
        201: {
            "description": "Accepted and queued",
            "content": {
                "application/json": {
                    "example": {
                        "id": "msg_01jdx3k6q8v2m4n5p6r7s8t9va",
                        "sent_as": "template",
                        "status": "queued",
                    }
                }
            },
        },
        200: {
            "description": "`dry_run=true`: what the send would be; nothing stored or sent",
            "content": {"application/json": {"example": DRY_RUN_EXAMPLE}},
        },
        **errors(
            *COMMON,
            404,
            409,
            413,
            codes={404: CHANNEL_NOT_FOUND},
            _404="`channel_id` names no channel of the account",
            _422="Invalid request, or a rule of the send refuses it (`invalid_phone_number`, `window_closed`,"
            " `template_not_found`, `template_not_approved`, `template_parameters_mismatch`,"
            " `marketing_preference_stopped`, `phone_number_required`, `idempotency_key_reused`, ...)",
            **NOT_FOUND,
        ),
    },
)
async def send_message(
    body: Annotated[SendMessageRequest, Body(openapi_examples=SEND_EXAMPLES)],
    request: Request,
    gateway: GatewayDep,
    principal: Member,
    idempotency_key: str | None = Header(None),
    dry_run: bool = Query(
        False,
        description="Run every check and answer 200 with the preview, cost and window; store, send nothing.",
    ),
) -> JSONResponse:
    if dry_run:  # no idempotency record either: a dry run may be repeated freely
        preview = await service.preview_send(gateway, principal=principal, request=body)
        return JSONResponse(preview_view(preview))
    return await accept_once(gateway, principal, body, request.url.path, idempotency_key)


@router.get(
    "/accounts/{account_id}/whatsapp/messages/{message_id}",
    summary="Get a message",
    description="A message sent through the API, a bulk batch or the dashboard, with its status now, its"
    " cost (priced by the price list of the day it was accepted, then as Meta's statuses settle it; a"
    " session message is `SESSION`), and its conversation's status. `upstream_status` is"
    " `held_for_quality_assessment` while Meta holds a template send for a quality check (template"
    " pacing): not failed, not sent again; null otherwise and once Meta's first status comes.",
    responses={
        200: {
            "description": "The message",
            "content": {"application/json": {"example": MESSAGE_EXAMPLE}},
        },
        **errors(
            *COMMON,
            404,
            codes={404: MESSAGE_NOT_FOUND},
            _404="No message with this id in the account",
            **NOT_FOUND,
        ),
    },
)
async def get_message(message_id: str, gateway: GatewayDep, principal: Member) -> dict[str, Any]:
    async with gateway.db.read() as session:
        found = await queries.read_message(session, principal=principal, message_id=message_id)
    return message_view(
        found.message, conversation_status=found.conversation_status.value, handled_by=found.handled_by
    )


@router.get(
    "/accounts/{account_id}/whatsapp/messages/{message_id}/deliveries",
    operation_id="list_message_deliveries",
    summary="List a message's status callback deliveries",
    responses={
        200: {
            "description": "The deliveries, newest first, each with every attempt",
            "content": {"application/json": {"example": {"data": [DELIVERY_EXAMPLE]}}},
        },
        **errors(
            *COMMON,
            404,
            codes={404: MESSAGE_NOT_FOUND},
            _404="No message with this id in the account",
            **NOT_FOUND,
        ),
    },
)
async def get_callback_deliveries(
    message_id: str,
    gateway: GatewayDep,
    principal: Member,
    limit: int = Query(50, ge=1, le=200),
) -> JSONResponse:
    """The message's status_callback deliveries with every attempt, newest first."""
    async with gateway.db.read() as session:
        await queries.read_message(session, principal=principal, message_id=message_id)  # 404 / 403
        found = await events.callback_deliveries(
            session, account_id=principal.account_id, message_id=message_id, limit=limit
        )
    return JSONResponse({"data": [delivery_view(d, a) for d, a in found]})


LIST_DESCRIPTION = """\
The messages sent through the API, in bulk batches and by agents in the dashboard (outbound; never a
customer's), on the channels whose inbox the key's user is a member of, newest first.

Each item is the message object of `GET .../whatsapp/messages/{message_id}`, with its conversation's
status now. Every filter is optional and they combine: `channel_id` (404 `channel_not_found` for a
channel of no account of yours, 403 `forbidden` for an inbox you are not a member of), `phone_number`
(E.164 or digits with the country code, 422 `invalid_phone_number` otherwise), `status`, `batch_id`,
`created_after` (inclusive) and `created_before` (exclusive), ISO 8601 times (UTC when they name no
zone).

Paging: up to `limit` messages (1-200, default 50) a page; when there are more, `next_before` holds
the id to pass as `before` for the next page (keyset paging by creation time and id: a page never
repeats or skips a message, even while new ones arrive), and it is null on the last page.
"""


@router.get(
    "/accounts/{account_id}/whatsapp/messages",
    operation_id="list_messages",
    summary="List sent messages",
    description=LIST_DESCRIPTION,
    response_model=None,
    responses={
        200: {"model": MessageListOut, "description": "A page of messages, newest first"},
        **errors(
            *COMMON,
            404,
            codes={404: CHANNEL_NOT_FOUND},
            _403="Another account, or `channel_id` of an inbox the key's user is not a member of",
            _404="`channel_id` names no channel of the account",
            _422="A filter's value is not valid; `details` names the field",
        ),
    },
)
async def list_messages(
    gateway: GatewayDep,
    principal: Member,
    channel_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="Only this channel's")] = None,
    phone_number: Annotated[
        str | None, Query(max_length=64, description="Only those to this number", examples=["+994501234567"])
    ] = None,
    status: Annotated[MessageStatus | None, Query(description="Only those with this status now")] = None,
    batch_id: Annotated[
        str | None, Query(max_length=queries.ID_MAX_LENGTH, description="Only this bulk batch's")
    ] = None,
    created_after: Annotated[
        datetime | None,
        Query(description="Created at or after this time (ISO 8601)", examples=["2026-11-24T00:00:00Z"]),
    ] = None,
    created_before: Annotated[
        datetime | None,
        Query(description="Created before this time (ISO 8601)", examples=["2026-11-25T00:00:00Z"]),
    ] = None,
    limit: Annotated[
        int, Query(ge=1, le=queries.LIST_LIMIT_MAX, description="At most this many (1-200)")
    ] = queries.LIST_LIMIT,
    before: Annotated[
        str | None,
        Query(
            max_length=queries.ID_MAX_LENGTH,
            description="A message id (`next_before` of the page before): the messages after it",
        ),
    ] = None,
) -> JSONResponse:
    page = await queries.list_messages(
        gateway.db,
        principal=principal,
        filters=queries.MessageFilters(
            channel_id=channel_id,
            phone_number=phone_number,
            status=status.value if status is not None else None,
            batch_id=batch_id,
            created_after=created_after,
            created_before=created_before,
        ),
        before=before,
        limit=limit,
    )
    return JSONResponse(
        {
            "data": [
                message_view(
                    sent.message,
                    conversation_status=sent.conversation_status.value,
                    handled_by=sent.handled_by,
                )
                for sent in page.messages
            ],
            "next_before": page.next_before,
        }
    )
