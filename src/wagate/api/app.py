"""The ASGI app: the `/v1` API, the Meta webhook receiver, and (unless disabled) the dispatcher."""

from __future__ import annotations

import functools
import hmac
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from wagate.accounts.endpoints import router as accounts_router
from wagate.api.api_docs import install_api_docs
from wagate.api.health import HealthChecks
from wagate.api.process import GatewayProcess
from wagate.bulk.endpoints import router as bulk_router
from wagate.channels.endpoints import router as channels_router
from wagate.channels.service import channel_id_for_number
from wagate.core.config import Settings, get_settings
from wagate.core.errors import MethodNotAllowed, NotFound, NotReady, WagateError, invalid_fields, invalid_json
from wagate.dashboard import install_dashboard
from wagate.events.endpoints import router as events_router
from wagate.http.limits import WEBHOOK_PATH, BodyRefused, RequestGuard
from wagate.http.openapi import operation_id
from wagate.http.responses import FastJSONResponse as JSONResponse
from wagate.messages.endpoints import router as messages_router
from wagate.messages.endpoints import send_message
from wagate.messages.send_fast import SEND_PATH, send_message_fast
from wagate.observability.logs import RequestLog
from wagate.observability.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from wagate.observability.metrics import Metrics
from wagate.templates.endpoints import router as templates_router
from wagate.usage.endpoints import router as usage_api
from wagate.whatsapp.receiver import ReceiverDeps
from wagate.whatsapp.receiver import receive as receive_webhook
from wagate.whatsapp.receiver import routes as whatsapp_webhook_routes

log = logging.getLogger(__name__)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(WagateError)
    async def _wagate_error(_: Request, exc: WagateError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        error = invalid_fields(exc.errors())
        return JSONResponse(error.body(), status_code=error.status_code)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        error: WagateError
        if exc.status_code == 400 and isinstance(exc.__cause__, ValueError | RecursionError):
            # FastAPI's answer to a body the JSON parser gave up on: integers of more than 4300
            # digits, nesting past the recursion limit, bytes that are not UTF-8. API.md: a malformed
            # JSON body is 422 `invalid_request`.
            error = invalid_json(exc.__cause__)
        elif exc.status_code == 404:
            error = NotFound()
        elif exc.status_code == 405:
            error = MethodNotAllowed()
        else:
            error = WagateError(str(exc.detail))
            error.status_code = exc.status_code
            error.code = "http_error"
        return JSONResponse(
            error.body(), status_code=error.status_code, headers=getattr(exc, "headers", None)
        )

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def _database_unavailable(_: Request, exc: Exception) -> JSONResponse:
        # Answered here (Starlette's ExceptionMiddleware), not by the catch-all below: that one
        # re-raises to the server, which logs a traceback per request and closes the client's
        # keep-alive connection, so a client's next request would meet a reset instead of a 503.
        log.warning("database unavailable: %r", exc)
        error = NotReady(headers={"Retry-After": "1"})
        return JSONResponse(error.body(), status_code=error.status_code, headers=error.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        return unexpected_error(exc)


def unexpected_error(exc: Exception) -> JSONResponse:
    """The answer to an exception no rule expected: 503 when the database is out of reach, else 500."""
    if isinstance(exc, OperationalError | InterfaceError):
        # The database is unreachable or refused the connection: nothing was stored, try again.
        log.warning("database unavailable: %r", exc)
        error: WagateError = NotReady(headers={"Retry-After": "1"})
    else:
        log.exception("unhandled error", exc_info=exc)
        error = WagateError()
    return JSONResponse(error.body(), status_code=error.status_code, headers=error.headers)


async def _fast_route(scope: Scope, receive: Receive, send: Send) -> None:
    """A hot route as a bare ASGI app (see WagateApp): its endpoint, its errors answered as the app's
    handlers answer them."""
    endpoint = scope["endpoint"]
    try:
        response = await endpoint(Request(scope, receive))
    except BodyRefused:
        raise  # the guard answered 413 or 408 already
    except WagateError as exc:
        response = JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.headers)
    except Exception as exc:
        response = unexpected_error(exc)
    await response(scope, receive, send)


class WagateApp(FastAPI):
    """FastAPI, except for the two hottest requests, which go through the same request log and guard
    as every request, then straight to their endpoint:
    - Meta's webhook POST: Meta sends about three for every message (DESIGN.md wants 3,000 a second),
      and FastAPI's own layers around a route (error middleware, body limit, exit stack, the router's
      matching) cost about a fifth of each one's CPU (docs/performance.md, "Status webhooks");
    - a send (`POST .../whatsapp/messages` without a query string), where those layers and the
      dependency solving cost about a sixth ("Where the time goes now")."""

    fast_stack: ASGIApp | None = None
    send_route: BaseRoute | None = None  # the documented route of a send: its label in logs and metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.fast_stack is not None and scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            fast: dict[str, Any] | None = None
            if path == WEBHOOK_PATH:
                fast = {"endpoint": receive_webhook}  # the request log's label: the fixed path
            elif not scope["query_string"] and (match := SEND_PATH.fullmatch(path)):
                fast = {"endpoint": send_message_fast, "route": self.send_route}
                fast["path_params"] = {"account_id": match[1]}  # digits, by SEND_PATH
            if fast is not None:
                scope.update(fast, app=self)
                await self.fast_stack(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


API_DESCRIPTION = """\
Every `/v1` operation takes an API key as `Authorization: Bearer <key>` and answers errors with one
body, `{"error": {"code", "message", "details"}}` (`ErrorBody`): `code` is stable and says which rule,
`details` names the fields of an `invalid_request`. A key acts for its account only (403 `forbidden`
for another account's id in the path); an agent's key sees only the channels of its inboxes.
"""


def create_app(settings: Settings | None = None, *, run_dispatcher: bool = True) -> FastAPI:
    settings = settings or get_settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        process = GatewayProcess.build(settings, metrics, dispatcher_runs=run_dispatcher)
        db, dispatcher, caches = process.db, process.dispatcher, process.caches
        app.state.health = process.checks
        # The two typed values handlers get (wagate.accounts.access.get_gateway, whatsapp.receiver._deps).
        app.state.gateway = process.gateway()
        app.state.receiver = ReceiverDeps(
            db,
            settings,
            lambda channel_id: dispatcher.running and (channel_id is None or dispatcher.owns(channel_id)),
            dispatcher.wake_webhooks,
            # SQLite: a body applied on receipt is one write instead of three (stored; claimed;
            # applied and deleted). Not on PostgreSQL, where each of the apply's statements is a round
            # trip for the few bodies of one group commit, and the dispatcher applies hundreds of
            # stored bodies with the same statements (docs/decisions/0003-status-webhooks.md).
            dispatcher.apply_webhook if db.is_sqlite else None,
            # PostgreSQL: stored, then applied by the hundred without a claim (two writes instead of
            # three; docs/decisions/0003-status-webhooks.md).
            None if db.is_sqlite else dispatcher.hand_over,
            dispatcher.hand_over_room,
            functools.partial(channel_id_for_number, caches),
        )
        try:
            # PostgreSQL: hear what other processes (workers, other APIs) commit, for the pages.
            await process.start(dispatch=run_dispatcher, hear_live=True)
            yield
        finally:
            await process.stop()

    telemetry = {} if settings.opentelemetry else {"tracing": False, "metrics": False, "logs": False}
    app = WagateApp(
        telemetry=telemetry,  # type: ignore[arg-type]
        title="wagate",
        version="1",
        summary="Outbound WhatsApp gateway: send templates, OTPs and text through the WhatsApp Cloud API.",
        description=API_DESCRIPTION,
        generate_unique_id_function=operation_id,  # `send_message`, not `send_message_v1_accounts_...`
        lifespan=lifespan,
        # FastAPI's pages load their scripts from a CDN; install_api_docs serves them from this origin.
        docs_url=None,
        redoc_url=None,
    )
    install_error_handlers(app)
    guard: dict[str, Any] = {
        "max_request_bytes": settings.max_request_bytes,
        "max_webhook_bytes": settings.max_webhook_bytes,
        "body_timeout_seconds": settings.body_timeout_seconds,
    }
    app.add_middleware(RequestGuard, **guard)
    for router in (
        channels_router,
        templates_router,
        messages_router,
        bulk_router,
        events_router,
        usage_api,
        accounts_router,
    ):
        app.include_router(router, prefix="/v1")
    # Outermost: its line and count cover every answer, the guard's refusals too.
    app.add_middleware(RequestLog, metrics=metrics)
    app.router.routes.extend(whatsapp_webhook_routes)  # the GET (subscription check); the POST as well
    app.fast_stack = RequestLog(RequestGuard(_fast_route, **guard), metrics=metrics)
    app.send_route = next(
        route for route in messages_router.routes if getattr(route, "endpoint", None) is send_message
    )
    install_dashboard(app)
    install_api_docs(app)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, Any]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz(request: Request) -> JSONResponse:
        """Readiness: the database answers, its schema is the one this code needs, and the dispatcher
        runs where this process runs one (503 `not_ready` saying which, otherwise)."""
        return (await _health(request).readiness()).response()

    @app.get("/metrics", include_in_schema=False)
    async def metrics_page(request: Request) -> Response:
        """Prometheus metrics, for the bearer of `WAGATE_METRICS_TOKEN` only: without one configured
        the page does not exist here (the metrics port serves it, see wagate.api.health)."""
        token = settings.metrics_token
        given = request.headers.get("authorization", "")
        if not token or not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            error = NotFound()
            return JSONResponse(error.body(), status_code=error.status_code)
        return Response(await _health(request).metrics_text(), media_type=METRICS_CONTENT_TYPE)

    return app


def _health(request: Request) -> HealthChecks:
    checks: HealthChecks = request.app.state.health
    return checks
