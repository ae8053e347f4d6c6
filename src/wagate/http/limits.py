"""What the gateway accepts at its edge, so that bad input is a clear 4xx and never reaches the database.

- Ids are positive integers that fit their columns: 32 bits for most (`Id`, `BodyId`), 64 for the
  rows that grow without bound (`MAX_BIG_ID`).
- No string of a request (path, query, JSON body) holds a C0 control character other than tab, line
  feed and carriage return: PostgreSQL refuses NUL in text, and none of them means anything in a phone
  number, a template name or a message.
- A JSON body is at most `MAX_JSON_DEPTH` levels deep (orjson, which writes responses, the idempotency
  hash and the JSON columns, stops at 255), and its integers fit in 64 bits (beyond, orjson and the
  databases cannot hold them: a larger number goes as a string) and its numbers are finite.
- A request body is at most `max_request_bytes` (`max_webhook_bytes` for Meta's webhooks), counted
  while it streams in, and arrives within `body_timeout_seconds` (`RequestGuard`; 413 / 408).
- A path is at most `MAX_PATH_LENGTH` characters, a query string at most `MAX_QUERY_LENGTH` with at
  most `MAX_QUERY_PARAMETERS` parameters of at most `MAX_QUERY_VALUE_LENGTH` characters each (422).
- An API key makes at most `api_key_requests_per_second` requests a second, with bursts of
  `api_key_burst` (`KeyRateLimiter`; 429 `rate_limited` with Retry-After).
- The request line and headers: see `wagate.http.serving` (431 past their size, 408 when they come
  too slowly).

Path and query strings are checked by `RequestGuard` before routing; JSON bodies by `RequestBody`, the
base of every request model, once they are parsed.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from typing import Annotated, Any, NoReturn
from urllib.parse import parse_qsl

import orjson
from pydantic import BaseModel, Field, model_validator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wagate.core.errors import InvalidRequest, PayloadTooLarge, RateLimited, RequestTimeout, WagateError

# Accounts, users, keys, channels, webhooks and conversations have INTEGER keys: PostgreSQL refuses a
# larger parameter for them ("integer out of range", a 500), so a larger id is refused here. Rows that
# can grow past it (outbox, deliveries, audit entries) have BIGINT keys: `MAX_BIG_ID`.
MAX_ID = 2**31 - 1
MAX_BIG_ID = 2**63 - 1
MIN_INTEGER = -(2**63)
MAX_INTEGER = 2**63 - 1
MAX_JSON_DEPTH = 64
MAX_PATH_LENGTH = 2048
MAX_QUERY_LENGTH = 8192
MAX_QUERY_PARAMETERS = 50
MAX_QUERY_VALUE_LENGTH = 2048
WEBHOOK_PATH = "/webhooks/whatsapp"

# Ids in paths and queries (parsed from text); in JSON bodies a number is required (BodyId). Declare
# a parameter as `channel_id: Id` or `channel_id: Id | None = None`: with `= Query(...)` FastAPI drops
# the bounds.
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
BodyId = Annotated[int, Field(strict=True, ge=1, le=MAX_ID)]


def parse_id(text: str | None) -> int | None:
    """An id sent as text (a form's select, a page's filter or cursor), or None when it cannot be one:
    not ASCII digits, or out of `Id`'s range."""
    if not text or len(text) > 10 or not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if 1 <= value <= MAX_ID else None


CONTROL_CHARACTER = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
CONTROL_CHARACTER_ISSUE = "contains a control character (only tab, line feed and carriage return are allowed)"


def json_problem(value: Any, path: tuple[str, ...] = (), depth: int = 0) -> tuple[str, str] | None:
    """(field, issue) of the first value of a parsed JSON document that breaks the rules above."""
    if isinstance(value, str):
        return (_field(path), CONTROL_CHARACTER_ISSUE) if CONTROL_CHARACTER.search(value) else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if MIN_INTEGER <= value <= MAX_INTEGER:
            return None
        return _field(path), "an integer beyond 64 bits (send a larger number as a string)"
    if isinstance(value, float):
        return None if math.isfinite(value) else (_field(path), "not a finite number")
    if depth >= MAX_JSON_DEPTH:
        return _field(path), f"nested deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, dict):
        for key, item in value.items():
            where = (*path, str(key))
            if CONTROL_CHARACTER.search(str(key)):
                return _field(where), CONTROL_CHARACTER_ISSUE
            if found := json_problem(item, where, depth + 1):
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if found := json_problem(item, (*path, str(index)), depth + 1):
                return found
    return None


# How a control character can appear in raw JSON (escaped: unescaped ones are not JSON); an escaped
# backslash before `b` or `f` matches too, which costs only a needless walk.
ESCAPED_CONTROL_CHARACTER = re.compile(rb"\\(?:u00[01][0-9a-fA-F]|[bf])")


def without_control_characters(value: Any) -> Any:
    """The parsed JSON with the control characters of its strings replaced by U+FFFD: for a body that
    must be stored though it breaks the rule (Meta's signed webhooks: a customer may type anything)."""
    if isinstance(value, str):
        return CONTROL_CHARACTER.sub("\ufffd", value)
    if isinstance(value, dict):
        return {without_control_characters(k): without_control_characters(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_control_characters(item) for item in value]
    return value


def _invalid(field: str, issue: str) -> InvalidRequest:
    return InvalidRequest(
        f"The request is not valid: {field}: {issue}.", details=[{"field": field, "issue": issue}]
    )


def _field(path: tuple[str, ...]) -> str:
    return ".".join(path) or "body"


class RequestBody(BaseModel):
    """The base of every JSON request body: the rules above, checked on the whole body at once.

    InvalidRequest is not a ValueError, so pydantic lets it through and the error handler answers
    it as it is: 422 `invalid_request` naming the field, before any field is validated.
    """

    @model_validator(mode="before")
    @classmethod
    def _within_limits(cls, data: Any) -> Any:
        if found := json_problem(data):
            field, issue = found
            raise _invalid(field, issue)
        return data


def query_problem(scope: Scope) -> tuple[str, str] | None:
    """(field, issue) of a control character or a length past its limit in the request's path or
    query string."""
    path = scope.get("path", "")
    if len(path) > MAX_PATH_LENGTH:
        return "path", f"longer than {MAX_PATH_LENGTH} characters"
    if CONTROL_CHARACTER.search(path):
        return "path", CONTROL_CHARACTER_ISSUE
    query = scope.get("query_string", b"").decode("latin-1")
    if len(query) > MAX_QUERY_LENGTH:
        return "query", f"longer than {MAX_QUERY_LENGTH} characters"
    if query.count("&") >= MAX_QUERY_PARAMETERS:
        return "query", f"more than {MAX_QUERY_PARAMETERS} parameters"
    if len(query) <= MAX_QUERY_VALUE_LENGTH and "%" not in query and not CONTROL_CHARACTER.search(query):
        return None  # short, nothing escaped, nothing to decode: the common case costs one scan
    for name, value in parse_qsl(query, keep_blank_values=True):
        if CONTROL_CHARACTER.search(name) or CONTROL_CHARACTER.search(value):
            return name, CONTROL_CHARACTER_ISSUE
        if len(name) > MAX_QUERY_VALUE_LENGTH or len(value) > MAX_QUERY_VALUE_LENGTH:
            return name[:100], f"longer than {MAX_QUERY_VALUE_LENGTH} characters"
    return None


# A message's or a batch's id in the path (operation 5, its deliveries, operation 7). One that cannot
# exist (past the path's length, a control character) is not a malformed request but a wrong id: the
# spec answers "404 when the id is wrong". The guard puts `IMPOSSIBLE_ID`, which no row has, in its
# place, so the route answers as for any unknown id (after the key and the account are checked) and
# the text never reaches the database.
_ID_IN_PATH = re.compile(
    r"(/v1/accounts/[0-9]{1,20}/whatsapp/(?:messages|bulk_messages)/)([^/]*)(/deliveries)?", re.S
)
IMPOSSIBLE_ID = "-"


def _with_impossible_id(scope: Scope) -> Scope | None:
    """The scope with its message or batch id replaced by IMPOSSIBLE_ID, when the id alone is what
    is wrong with the path; None otherwise."""
    found = _ID_IN_PATH.fullmatch(scope.get("path", ""))
    if found is None or found.group(2) in ("", "window"):
        return None
    path = found.group(1) + IMPOSSIBLE_ID + (found.group(3) or "")
    changed = {**scope, "path": path, "raw_path": path.encode()}
    return None if query_problem(changed) else changed


class BodyRefused(Exception):
    """Raised into the app by `receive` once the body passed its size or time limit (the 413 or 408
    is already sent)."""


class RequestGuard:
    """Pure ASGI middleware: control characters or lengths past their limits in the path or query are
    a 422; a body past its limit a 413 `payload_too_large` as soon as the limit is passed (or announced
    by Content-Length); a body still incomplete `body_timeout_seconds` after the app began to read it
    a 408 `request_timeout` (a slow client holds a connection and a task, never for long).

    The body is counted while it streams in, so an endless chunked upload costs at most the limit in
    memory; the 413 and 408 say `Connection: close`, so the server stops reading the rest.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_request_bytes: int,
        max_webhook_bytes: int,
        body_timeout_seconds: float = 30.0,
    ) -> None:
        self.app = app
        self.max_request_bytes = max_request_bytes
        self.max_webhook_bytes = max_webhook_bytes
        self.body_timeout_seconds = body_timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if problem := query_problem(scope):
            if (wrong_id := _with_impossible_id(scope)) is None:
                field, issue = problem
                await _answer(send, _invalid(field, issue))
                return
            scope = wrong_id
        limit = self.max_webhook_bytes if scope["path"] == WEBHOOK_PATH else self.max_request_bytes
        announced = _content_length(scope)
        # Compared as text first: a Content-Length of thousands of digits is not worth an int().
        if announced.isascii() and announced.isdigit() and (len(announced) > 18 or int(announced) > limit):
            await _answer(send, _too_large(limit), close=True)
            return

        received = 0
        started = answered = body_complete = False
        deadline: float | None = None

        async def refuse(error: WagateError) -> NoReturn:
            nonlocal answered
            if not started:
                await _answer(send, error, close=True)
                answered = True
            raise BodyRefused

        # uvicorn's request cycle, whose event is set while a part of the body waits to be read.
        arrived = getattr(getattr(receive, "__self__", None), "message_event", None)

        async def counted_receive() -> Message:
            nonlocal received, body_complete, deadline
            if body_complete:
                return await receive()  # after the body: waiting for a disconnect takes its time
            loop = asyncio.get_running_loop()
            if deadline is None:
                deadline = loop.time() + self.body_timeout_seconds
            if isinstance(arrived, asyncio.Event) and arrived.is_set():
                # What the read returns is there already: no timer to make and cancel (7 us a
                # request, docs/decisions/0005-request-path.md).
                message = await receive()
            else:
                try:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
                except TimeoutError:
                    await refuse(_too_slow(self.body_timeout_seconds))
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    await refuse(_too_large(limit))
                body_complete = not message.get("more_body", False)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if answered:
                return  # the app's answer to the read that failed: the client has its 413
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except BodyRefused:
            if not answered:
                raise


def _content_length(scope: Scope) -> str:
    """The Content-Length header's value ('' when there is none), read off the scope's raw headers
    (lower-case names in ASGI)."""
    name: bytes
    value: bytes
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.decode("latin-1")
    return ""


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is too large: send at most {limit} bytes.")


def _too_slow(seconds: float) -> RequestTimeout:
    return RequestTimeout(f"The request body did not arrive within {seconds:g} seconds.")


class KeyRateLimiter:
    """A token bucket per API key in this process: `per_second` requests a second on average, up to
    `burst` at once; 0 turns it off.

    Per process on purpose: it costs a dict lookup and no database round trip on the hot path. With N
    API processes a key gets up to N times the rate, so the default leaves room for normal use in one
    process and stops a runaway client (a loop without backoff) from taking the process from others.
    """

    def __init__(self, per_second: float, burst: int) -> None:
        self.per_second = per_second
        self.burst = max(burst, 1)
        self._buckets: dict[int, tuple[float, float]] = {}  # key id -> (tokens left, when counted)

    def take(self, key_id: int) -> None:
        """Count one request of the key, or raise 429 `rate_limited` saying when to retry."""
        if self.per_second <= 0:
            return
        now = time.monotonic()
        tokens, counted_at = self._buckets.get(key_id, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - counted_at) * self.per_second)
        if tokens >= 1:
            self._buckets[key_id] = (tokens - 1, now)
            return
        self._buckets[key_id] = (tokens, now)
        wait = math.ceil((1 - tokens) / self.per_second)
        raise RateLimited(
            f"Too many requests with this API key: at most {self.per_second:g} a second"
            f" (bursts of {self.burst}); retry after {wait} s.",
            headers={"Retry-After": str(wait)},
        )


async def _answer(send: Send, error: WagateError, *, close: bool = False) -> None:
    body = orjson.dumps(error.body())
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
