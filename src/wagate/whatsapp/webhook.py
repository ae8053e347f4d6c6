"""Receiver of Meta's webhooks (API.md section 9): verify, store, acknowledge; the dispatcher applies."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from fastapi.responses import PlainTextResponse, Response
from sqlalchemy import insert
from sqlalchemy.orm import Session
from starlette.requests import Request
from starlette.routing import Route

from wagate.config import Settings
from wagate.db import Database, table_of, utcnow
from wagate.limits import ESCAPED_CONTROL_CHARACTER, without_control_characters
from wagate.outbox.models import JobKind, OutboxJob, Priority, outbox_row
from wagate.outbox.notify import notify_outbox
from wagate.responses import FastJSONResponse as JSONResponse
from wagate.whatsapp.payloads import MalformedWebhook, check_envelope
from wagate.whatsapp.signature import verify

log = logging.getLogger(__name__)
# Built once, values bound at execution: Meta sends a few of these for every message.
_STORE_WEBHOOK = insert(table_of(OutboxJob))


@dataclass(frozen=True)
class ReceiverDeps:
    """What the receiver needs, set on the app by app.py (the receiver sits below the dispatcher and the
    domains, so it is handed callables rather than the dispatcher)."""

    db: Database
    settings: Settings
    applied_here: Callable[[], bool]  # this process's dispatcher applies stored bodies (else NOTIFY)
    wake: Callable[[], None]  # stored bodies are waiting: apply them now


def _deps(request: Request) -> ReceiverDeps:
    deps: ReceiverDeps = request.app.state.receiver
    return deps


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


async def verify_subscription(request: Request) -> Response:
    params = request.query_params
    token = _deps(request).settings.meta_verify_token
    # Compared as UTF-8 bytes: compare_digest refuses str with characters beyond ASCII.
    given = params.get("hub.verify_token", "").encode()
    if params.get("hub.mode") != "subscribe" or not token or not hmac.compare_digest(given, token.encode()):
        return _error(403, "forbidden", "The verify token does not match.")
    return PlainTextResponse(params.get("hub.challenge", ""))


async def receive(request: Request) -> Response:
    deps = _deps(request)
    raw = await request.body()
    secret = deps.settings.meta_app_secret
    if not secret:
        log.error("a Meta webhook came in but WAGATE_META_APP_SECRET is not set: refusing it")
    if not secret or not verify(secret, raw, request.headers.get("x-hub-signature-256", "")):
        return _error(401, "unauthorized", "The X-Hub-Signature-256 signature is missing or wrong.")
    try:
        body = orjson.loads(raw)
        # Only the envelope is judged here: an item that cannot be applied is kept for an operator
        # when the body is applied, and the rest goes on (API.md section 13). A 400 makes Meta retry
        # the whole body for days and may disable the webhook.
        check_envelope(body)
    except (orjson.JSONDecodeError, MalformedWebhook) as exc:
        return _error(400, "invalid_request", f"The body is not a WhatsApp webhook: {exc}")
    if ESCAPED_CONTROL_CHARACTER.search(raw):
        # Stored as text (a customer's message), where PostgreSQL refuses NUL: shown as U+FFFD.
        body = without_control_characters(body)

    def store(session: Session) -> None:
        # Stored before the 200: Meta does not resend what it saw acknowledged.
        now = utcnow()
        row = outbox_row(
            JobKind.meta_webhook, payload=body, run_at=now, priority=Priority.background, now=now
        )
        session.connection().execute(_STORE_WEBHOOK, row)
        if not deps.applied_here():  # ours applies it; otherwise a worker elsewhere must
            notify_outbox(session, None)

    await deps.db.write(store)
    deps.wake()
    return Response(status_code=200)


# Plain Starlette routes: Meta's webhooks need none of FastAPI's parameter machinery, and they come
# several times for every message sent.
routes = [
    Route("/webhooks/whatsapp", verify_subscription, methods=["GET"]),
    Route("/webhooks/whatsapp", receive, methods=["POST"]),
]
