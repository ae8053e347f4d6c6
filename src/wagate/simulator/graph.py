"""The simulated Graph API routes: ``POST /{version}/{phone_number_id}/messages`` and the template listing.

The send route is the hot path of every benchmark, so it reads and writes JSON with orjson directly
instead of going through pydantic models.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import orjson
from fastapi import APIRouter, Request, Response

from wagate.simulator.customers import Customer, digits_of
from wagate.simulator.faults import ConnectionFault
from wagate.simulator.magic import FAILURE_ERRORS, Fault, fault_for
from wagate.simulator.payloads import Recipient
from wagate.simulator.send_log import SentRecord, new_wamid, now_pair
from wagate.simulator.state import HeldSend, SimulatorState
from wagate.simulator.validation import (
    GraphError,
    check_bearer,
    error_for_code,
    rate_limit_hit,
    server_error,
    validate_send,
)
from wagate.simulator.webhooks import StatusStep, WebhookSender

log = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 25
MAX_PAGE_SIZE = 1000


def json_response(data: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status_code, media_type="application/json")


def error_response(error: GraphError) -> Response:
    return json_response(error.body(), error.http_status)


def _encode_cursor(index: int) -> str:
    return base64.b64encode(str(index).encode()).decode("ascii")


def _decode_cursor(cursor: str) -> int | None:
    try:
        return int(base64.b64decode(cursor.encode("ascii"), validate=True).decode("ascii"))
    except ValueError:
        return None


def status_steps(state: SimulatorState, fault: Fault | None) -> list[StatusStep]:
    delays = state.config.status_delays
    if fault in (Fault.UNDELIVERABLE, Fault.REENGAGEMENT):
        return [StatusStep(delays.sent, "failed", FAILURE_ERRORS[fault])]
    if fault is Fault.SENT_ONLY:
        return [StatusStep(delays.sent, "sent")]
    if fault is Fault.FAILED_THEN_DELIVERED:
        return [
            StatusStep(delays.sent, "sent"),
            StatusStep(delays.delivered, "failed", FAILURE_ERRORS[fault]),
            StatusStep(max(delays.read, delays.delivered), "delivered"),
        ]
    steps = [StatusStep(delays.sent, "sent"), StatusStep(delays.delivered, "delivered")]
    if state.config.read_enabled:
        steps.append(StatusStep(delays.read, "read"))
    return steps


# Magic numbers that stand for a connection fault rather than an answer.
_MAGIC_CONNECTION_FAULTS = {
    Fault.RESET: ConnectionFault.RESET_BEFORE,
    Fault.RESET_AFTER_ACCEPT: ConnectionFault.RESET_AFTER,
    Fault.HANG: ConnectionFault.HANG_BEFORE,
}


SendHandler = Callable[[str, Request], Awaitable[Response]]


def build_send_handler(state: SimulatorState, sender: WebhookSender) -> SendHandler:
    """`POST /{version}/{phone_number_id}/messages`: what the route does, given the number's id. The
    app calls it past FastAPI's routing (see `SimulatorApp`), and the router registers it too."""

    async def send_message(phone_number_id: str, request: Request) -> Response:
        try:
            check_bearer(request.headers.get("authorization"), state.config.access_tokens)
            raw_body = await request.body()
            try:
                body = orjson.loads(raw_body)
            except orjson.JSONDecodeError:
                raise GraphError(400, 100, "Invalid parameter", "Request body is not valid JSON.") from None
            keys = _recipient_keys(body)
            # Injected faults come before validation: they stand for the network or Meta's side failing.
            connection_fault = state.take_fault(phone_number_id, keys)
            if connection_fault is not None and not connection_fault.reaches_meta:
                return await _fail_connection(request, connection_fault, state.config.slow_response_seconds)
            # A send meets one injected fault at most: a connection fault leaves fail_next for the next.
            injected = None if connection_fault else state.take_injected_failure(phone_number_id, keys)
            if injected is not None and injected != 408:
                raise error_for_code(injected)
            channel = state.channel(phone_number_id)
            valid = validate_send(body, state.templates_for(channel.waba_id))
            customer = state.customers.resolve(channel.waba_id, valid.wa_id, valid.recipient)
            recipient = Recipient(customer, by_user_id=valid.recipient is not None)
            # A user id whose number is known fails as that number would.
            fault = fault_for(customer.wa_id) if customer.wa_id else None
            if connection_fault is None and fault in _MAGIC_CONNECTION_FAULTS:
                connection_fault = _MAGIC_CONNECTION_FAULTS[fault]
                if not connection_fault.reaches_meta:
                    return await _fail_connection(
                        request, connection_fault, state.config.slow_response_seconds
                    )
            if fault is Fault.RATE_LIMITED:
                raise rate_limit_hit()
            if fault is Fault.SERVER_ERROR:
                raise server_error()
            wall, mono = now_pair()
            if state.over_rate_limit(phone_number_id, mono):
                raise rate_limit_hit()
        except GraphError as error:
            state.refusals[error.code] = state.refusals.get(error.code, 0) + 1
            return error_response(error)

        template = valid.template
        # Real wamids embed the recipient; never a number that Meta would hide.
        wamid = _answer_wamid(state, keys) or new_wamid(recipient.wa_id or customer.user_id)
        state.record(
            SentRecord(
                received_at=wall,
                received_monotonic=mono,
                phone_number_id=phone_number_id,
                waba_id=channel.waba_id,
                to=valid.to if valid.to is not None else customer.wa_id,
                recipient=valid.recipient,
                user_id=customer.user_id,
                type=valid.type,
                body_json=raw_body,
                biz_opaque_callback_data=valid.biz_opaque_callback_data,
                wamid=wamid,
                template_name=template.get("name") if template else None,
                template_language=template.get("language") if template else None,
                template_category=template.get("category") if template else None,
                answer_fault=_answer_fault(connection_fault, fault, injected),
            )
        )
        # Template pacing: Meta holds the send for a quality check, and its statuses wait.
        held = template is not None and state.take_hold(template.get("category"))
        if state.config.auto_statuses:
            category = str(template.get("category", "utility")).lower() if template else "service"
            window_open = category == "utility" and state.window_open(phone_number_id, customer.user_id, wall)
            sender.schedule_statuses(
                channel,
                status_steps(state, fault),
                wamid=wamid,
                recipient=recipient,
                biz_opaque_callback_data=valid.biz_opaque_callback_data,
                pricing_category=category,
                billable=state.billable(category, window_open, wall),
                release=_hold(state, phone_number_id, keys, wamid) if held else None,
            )
        if connection_fault in (ConnectionFault.RESET_AFTER, ConnectionFault.CLOSE_AFTER):
            # Meta has the message (its statuses will come); the answer never does.
            return await _fail_connection(request, connection_fault, state.config.slow_response_seconds)
        if fault is Fault.SLOW or injected == 408 or connection_fault is ConnectionFault.HANG_AFTER:
            # The message went out; only the reply is late, which is what a client timeout looks like.
            await _late_reply(request, state.config.slow_response_seconds)
        elif state.config.response_latency_seconds > 0:
            await asyncio.sleep(state.config.response_latency_seconds)
        return json_response(
            {
                "messaging_product": "whatsapp",
                "contacts": [_answer_contact(valid.to, valid.wa_id, customer, valid.recipient)],
                "messages": [
                    {"id": wamid, "message_status": "held_for_quality_assessment" if held else "accepted"}
                ],
            }
        )

    return send_message


def build_graph_router(state: SimulatorState, sender: WebhookSender, send: SendHandler) -> APIRouter:
    router = APIRouter()

    @router.post("/{version}/{phone_number_id}/messages")
    async def send_message(version: str, phone_number_id: str, request: Request) -> Response:
        return await send(phone_number_id, request)

    @router.get("/{version}/{waba_id}/message_templates")
    async def list_templates(version: str, waba_id: str, request: Request) -> Response:
        try:
            check_bearer(request.headers.get("authorization"), state.config.access_tokens)
            query = request.query_params
            try:
                limit = int(query.get("limit", DEFAULT_PAGE_SIZE))
            except ValueError:
                raise GraphError(400, 100, "Invalid parameter", "limit must be a number") from None
            if not 1 <= limit <= MAX_PAGE_SIZE:
                raise GraphError(400, 100, "Invalid parameter", f"limit must be 1..{MAX_PAGE_SIZE}")
            start = 0
            if "after" in query:
                cursor = _decode_cursor(query["after"])
                if cursor is None:
                    raise GraphError(400, 100, "Invalid parameter", "after is not a valid cursor")
                start = cursor + 1
        except GraphError as error:
            return error_response(error)

        templates = [
            t
            for t in state.templates_for(waba_id)
            if all(
                query.get(key) is None or str(t.get(key, "")).upper() == str(query.get(key)).upper()
                for key in ("name", "status", "language", "category")
            )
        ]
        page = templates[start : start + limit]
        fields = [f.strip() for f in query.get("fields", "").split(",") if f.strip()]
        data = [_select(t, fields) for t in page]
        result: dict[str, Any] = {"data": data}
        if page:
            paging: dict[str, Any] = {
                "cursors": {"before": _encode_cursor(start), "after": _encode_cursor(start + len(page) - 1)}
            }
            if start + len(page) < len(templates):
                after = _encode_cursor(start + len(page) - 1)
                paging["next"] = str(request.url.include_query_params(after=after, limit=limit))
            result["paging"] = paging
        return json_response(result)

    return router


def _hold(
    state: SimulatorState, phone_number_id: str, keys: tuple[str, ...], wamid: str
) -> asyncio.Future[None]:
    """Keep a held send until `POST /_sim/held/release` or `held_release_seconds` lets it go."""
    loop = asyncio.get_running_loop()
    held = HeldSend(wamid, phone_number_id, keys, loop.create_future())
    state.held.append(held)
    if state.config.held_release_seconds is not None:
        loop.call_later(state.config.held_release_seconds, state.let_go, held)
    return held.release


def _recipient_keys(body: Any) -> tuple[str, ...]:
    """What ``fail_next`` / ``answer_wamid_next`` may name a send by: the digits of "to", the user id."""
    if not isinstance(body, dict):
        return ()
    keys = []
    if isinstance(body.get("to"), str):
        keys.append(digits_of(body["to"]))
    if isinstance(body.get("recipient"), str):
        keys.append(body["recipient"].strip())
    return tuple(keys)


def _answer_wamid(state: SimulatorState, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        wamid = state.wamid_next.pop(key, None)
        if wamid is not None:
            return wamid
    return None


def _answer_contact(
    to: str | None, wa_id: str | None, customer: Customer, recipient: str | None
) -> dict[str, str]:
    """Meta's ``contacts[0]``: ``input`` as sent and ``wa_id`` for a send to a number, ``input`` and
    ``user_id`` (no ``wa_id``) for a send to a business-scoped user id."""
    if recipient is not None:
        return {"input": recipient, "user_id": customer.user_id}
    assert to is not None and wa_id is not None  # for mypy: validate_send gives one or the other
    return {"input": to, "wa_id": wa_id}


async def _late_reply(request: Request, seconds: float) -> None:
    """Hold the reply back; stop early once the client has given up, so shutdown is not delayed."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        if await request.is_disconnected():
            return
        await asyncio.sleep(min(0.05, remaining))


def _answer_fault(
    connection_fault: ConnectionFault | None, fault: Fault | None, injected: int | None
) -> str | None:
    if connection_fault is not None:
        return connection_fault.value
    if fault is Fault.SLOW or injected == 408:
        return ConnectionFault.HANG_AFTER.value
    return None


async def _fail_connection(request: Request, fault: ConnectionFault, hang_seconds: float) -> Response:
    """Fail the request's connection itself: no HTTP answer ever reaches the client.

    A reset sets SO_LINGER to 0 before closing, so the kernel sends a TCP RST (the client sees
    ``ECONNRESET``); a close is an orderly FIN (the client sees the server disconnect). A hang holds
    the request until the client gives up (its read timeout) or ``hang_seconds`` pass, then closes.
    The response returned is never written: uvicorn drops writes to a closed connection.
    """
    if fault is ConnectionFault.HANG_BEFORE:
        await _late_reply(request, hang_seconds)
    transport = _transport_of(request)
    if transport is None:
        # A server that does not expose its connections (not uvicorn): the closest is a 502.
        log.warning("simulator: cannot drop the connection under this server; answering 502 instead")
        return json_response({"error": {"message": "simulated connection fault", "code": 1}}, 502)
    if fault in (ConnectionFault.RESET_BEFORE, ConnectionFault.RESET_AFTER):
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    else:
        transport.close()
    return Response(status_code=204)


def _transport_of(request: Request) -> asyncio.Transport | None:
    """The connection's transport under uvicorn: its ASGI ``receive`` is a bound method of the
    request cycle, which holds the transport (neither Starlette nor FastAPI wrap ``receive`` on the
    way to a route)."""
    cycle = getattr(request.receive, "__self__", None)
    transport = getattr(cycle, "transport", None)
    # Duck-typed: uvloop's transports are not subclasses of asyncio's.
    if transport is None or not callable(getattr(transport, "abort", None)):
        return None
    return cast("asyncio.Transport", transport)


def _select(template: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    if not fields:
        return template
    # Meta always returns the id, whatever fields were asked for.
    selected = {name: template[name] for name in fields if name in template}
    selected["id"] = template["id"]
    return selected
