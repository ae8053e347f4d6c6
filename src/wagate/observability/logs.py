"""Structured logs: one JSON line per request and per send, and every other log line as JSON too
(docs/operations.md, "Logs").

The line per request and the line per send come on the hot path, thousands a second: they are
structlog's own logger (`log_request`, `log_send`), rendered by orjson and written as bytes, about
15 us of CPU each, where the standard library's record and formatter cost about 70 us. The rest (our
modules' warnings, uvicorn, the libraries) logs through the standard library, rendered by structlog's
formatter into the same JSON shape. `configure_logging` sets both up (or readable text for a terminal,
`WAGATE_LOG_FORMAT=text`); until it runs (the tests' in-process gateways), the two hot loggers drop
their info lines.

The request line is written by `RequestLog`, the outermost middleware: it gives each request an id
(the caller's `X-Request-Id` when it is a sensible one, else a new one), answers it in the response's
`X-Request-Id` header, and the send's outbox row carries it, so the dispatcher's line for that send
names the request that accepted it.

Nothing secret goes into a line: no header, no body, no query string (Meta's subscription check puts
the verify token there), only the path, which holds ids.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Callable, MutableMapping
from contextvars import ContextVar
from typing import Any

import orjson
import structlog
from fastapi.routing import iter_route_contexts
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wagate.observability.metrics import UNMATCHED_ROUTE, Metrics

_hot_log = structlog.get_logger()  # resolved at its first line, after `configure_logging`


def log_request(**fields: Any) -> None:
    _hot_log.info("request", logger="wagate.requests", **fields)


def log_send(**fields: Any) -> None:
    _hot_log.info("send", logger="wagate.sends", **fields)


# Until `configure_logging` runs, the hot loggers drop their info lines (no line per request of the
# tests' in-process gateways).
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

# A caller's id is taken as it is when it is short and plain (it is echoed in a header and a log line).
_CALLER_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")

# What the current request has learnt for its log line (the message it accepted, its channel, ...).
# A dict in a context variable: the handler adds to the same dict the middleware will log.
_request_fields: ContextVar[dict[str, Any] | None] = ContextVar("wagate_request_fields", default=None)


def current_request_id() -> str | None:
    fields = _request_fields.get()
    return None if fields is None else fields["request_id"]


def note_request(**fields: Any) -> None:
    """Add fields to the current request's log line (nothing outside a request)."""
    current = _request_fields.get()
    if current is not None:
        current.update(fields)


def new_request_id() -> str:
    return "req_" + os.urandom(10).hex()


def route_label(scope: Scope, templates: dict[int, str]) -> str:
    """The route template that answered (`/v1/accounts/{account_id}/whatsapp/messages`), never the raw
    path: a label per path would let any client mint new series. `templates`: see `route_templates`."""
    route = scope.get("route")
    if route is not None:
        return templates.get(id(route)) or str(route.path)
    if "endpoint" not in scope:
        return UNMATCHED_ROUTE
    if scope.get("path_params"):  # a mount (the dashboard's static files)
        return f"{scope.get('root_path', '')}/{{path}}"
    return str(scope["path"])  # a plain Starlette route (Meta's webhooks): a fixed path


def route_templates(app: Any) -> dict[int, str]:
    """The full path template of each route, by the route's id: FastAPI includes routers lazily, so the
    route a request names in its scope knows its path without the router's prefix (`/v1`)."""
    contexts = iter_route_contexts(app.routes)
    return {id(context.original_route): context.path_format for context in contexts if context.path_format}


class RequestLog:
    """Pure ASGI middleware: the request's id, its line in the log and its count in the metrics."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self.templates: dict[int, str] | None = None  # read from the app at its first request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                text = value.decode("latin-1")
                if _CALLER_REQUEST_ID.fullmatch(text):
                    request_id = text
                break
        request_id = request_id or new_request_id()
        fields: dict[str, Any] = {"request_id": request_id}
        token = _request_fields.set(fields)
        status = 500  # what the server answers when the app raises before starting a response

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _request_fields.reset(token)
            seconds = time.perf_counter() - started
            if self.templates is None:
                self.templates = route_templates(scope["app"])
            route = route_label(scope, self.templates)
            self.metrics.request(route, scope["method"], status, seconds)
            log_request(
                **fields,
                method=scope["method"],
                path=scope["path"],
                route=route,
                status=status,
                duration_ms=round(seconds * 1000, 2),
            )


def _json(event: Any, **_: Any) -> str:
    return orjson.dumps(event, default=str).decode()


def _json_bytes(event: Any, **_: Any) -> bytes:
    return orjson.dumps(event, default=str)


class _Timestamp:
    """ISO 8601 in UTC with microseconds, like structlog's TimeStamper at a third of its cost: the
    part up to the second is formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(self, _: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        event["timestamp"] = f"{self._prefix}.{int((now - second) * 1_000_000):06d}Z"
        return event


def _drop_terminal_colours(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    event.pop("color_message", None)  # uvicorn's copy of its message with ANSI colours
    return event


def configure_logging(level: str, format: str) -> None:
    """Render every log line of the process (ours, uvicorn's, the libraries') as `format`: `json` (one
    object per line: timestamp, level, logger, event and the line's fields) or `text`."""
    json = format == "json"
    renderer: Callable[..., Any] = (
        structlog.processors.JSONRenderer(serializer=_json)
        if json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    stamp = _Timestamp()
    # The hot lines: filtered by level before any work, rendered straight to bytes, the logger cached.
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            stamp,
            structlog.processors.JSONRenderer(serializer=_json_bytes) if json else renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=(
            structlog.BytesLoggerFactory(sys.stderr.buffer)
            if json
            else structlog.PrintLoggerFactory(sys.stderr)
        ),
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            stamp,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(),
            _drop_terminal_colours,
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's own handlers would print its lines in its format: they go through ours instead. Its
    # access log is off (uvicorn_options): `RequestLog` writes the line per request, with its id.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    # Alembic announces each of its plugins at start-up; its migrations' lines stay.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
