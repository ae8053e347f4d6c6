"""Receiver of Meta's webhooks (API.md section 9): verify, store, acknowledge; the dispatcher applies."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Any

import orjson
from fastapi.responses import PlainTextResponse, Response
from sqlalchemy import Insert, insert
from sqlalchemy.orm import Session
from starlette.requests import Request
from starlette.routing import Route

from wagate.core.config import Settings
from wagate.core.db import Database, dialect_name, utcnow
from wagate.core.tables import insert_from_json, table_of
from wagate.core.units import Mergeable
from wagate.http.limits import ESCAPED_CONTROL_CHARACTER, without_control_characters
from wagate.http.responses import FastJSONResponse as JSONResponse
from wagate.outbox.models import JobKind, OutboxJob, Priority, outbox_row
from wagate.outbox.notify import notify_outbox
from wagate.whatsapp.payloads import MalformedWebhook
from wagate.whatsapp.signature import verify
from wagate.whatsapp.webhook_body import check_envelope, phone_number_ids

log = logging.getLogger(__name__)


@cache
def _store_statement(dialect: str) -> Insert:
    """Built once, values bound at execution: Meta sends a few of these for every message. On
    PostgreSQL the rows go as one JSON parameter (`insert_from_json`): the driver then handles one
    value, not sixteen per body (docs/decisions/0003-status-webhooks.md)."""
    outbox = table_of(OutboxJob)
    if dialect == "postgresql":
        return insert_from_json(outbox, "rows").returning(outbox.c.id)
    return insert(outbox)


@dataclass(frozen=True)
class ReceiverDeps:
    """What the receiver needs, set on the app by api/app.py (the receiver sits below the dispatcher and the
    domains, so it is handed callables rather than the dispatcher)."""

    db: Database
    settings: Settings
    # This process's dispatcher applies the channel's stored bodies (else NOTIFY its owner).
    applied_here: Callable[[int | None], bool]
    wake: Callable[[int | None], None]  # bodies are stored for the channel: claim and apply them now
    # Applies a body about a channel of `applied_here` at once (False: it could not; store it).
    # None: every body is stored first (PostgreSQL; see api/app.py).
    apply_now: Callable[[dict[str, Any]], Awaitable[bool]] | None
    # Takes a body stored for a channel of `applied_here` (its outbox row's id, its channel), to
    # apply it without claiming the row (PostgreSQL; see api/app.py). None: stored bodies are claimed.
    hand_over: Callable[[int, int | None, dict[str, Any]], None] | None
    # Whether `hand_over` takes more now (it holds a bounded number).
    hand_over_room: Callable[[], bool]
    # The channel of a business phone number id (None: not ours): a body is applied by the process
    # that sends for its channel (see `receive`).
    channel_of: Callable[[str], Awaitable[int | None]]


# A body handed over is due for a claim only this long after it was stored: until then its row is
# left to the process that stored it, which applies it without a claim (`ReceiverDeps.hand_over`).
# Past it (that process stopped, or its write failed), any claim of the channel takes it.
HANDED_OVER_SECONDS = 5.0


@dataclass(frozen=True)
class _Stored:
    body: dict[str, Any]
    channel_id: int | None
    notify: bool
    handed_over: bool


def _store_bodies(session: Session, bodies: list[_Stored]) -> list[int | None]:
    """The bodies that came in together, in one statement (they share a batch: see `Mergeable`).
    Returns each one's row id on PostgreSQL (None on SQLite, whose bodies are not handed over)."""
    now = utcnow()
    later = now + timedelta(seconds=HANDED_OVER_SECONDS)
    rows = [
        outbox_row(
            JobKind.meta_webhook,
            payload=stored.body,
            run_at=later if stored.handed_over else now,
            priority=Priority.background,
            now=now,
            channel_id=stored.channel_id,
        )
        for stored in bodies
    ]
    dialect = dialect_name(session)
    for channel_id in dict.fromkeys(stored.channel_id for stored in bodies if stored.notify):
        notify_outbox(session, channel_id, webhook=True)
    if dialect != "postgresql":
        session.connection().execute(_store_statement(dialect), rows)
        return [None] * len(bodies)
    # One INSERT ... SELECT in the rows' order: the sequence numbers them in that order, whatever
    # order RETURNING gives them back in.
    return sorted(session.connection().execute(_store_statement(dialect), {"rows": rows}).scalars())


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
    # Stored with its channel, so only the process that sends for the channel applies it: its status
    # updates then never wait on (or deadlock with) that process's own writes to the same messages.
    # A body about several numbers, or none we know, is applied by whichever dispatcher takes it.
    numbers = phone_number_ids(body)
    channel_id = await deps.channel_of(numbers.pop()) if len(numbers) == 1 else None
    # Applied at once by the process that sends for its channel, committed before the 200: then it is
    # never stored, claimed and deleted (docs/decisions/0003-status-webhooks.md).
    apply_now = deps.apply_now
    if (
        apply_now is not None
        and channel_id is not None
        and deps.applied_here(channel_id)
        and await apply_now(body)
    ):
        return Response(status_code=200)

    # Stored before the 200: Meta does not resend what it saw acknowledged. Ours applies it; otherwise
    # a worker elsewhere must be told.
    applied_here = deps.applied_here(channel_id)
    hand_over = deps.hand_over if applied_here and deps.hand_over_room() else None
    stored = _Stored(body, channel_id, notify=not applied_here, handed_over=hand_over is not None)
    job_id = await deps.db.write(Mergeable(None, stored, _store_bodies))
    if hand_over is not None and job_id is not None:
        hand_over(job_id, channel_id, body)
    else:
        deps.wake(channel_id)
    return Response(status_code=200)


# Plain Starlette routes: Meta's webhooks need none of FastAPI's parameter machinery, and they come
# several times for every message sent.
routes = [
    Route("/webhooks/whatsapp", verify_subscription, methods=["GET"]),
    Route("/webhooks/whatsapp", receive, methods=["POST"]),
]
