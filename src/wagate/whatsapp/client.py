"""The Cloud API adapter: Meta's own JSON over one long-lived, keep-alive HTTP session.

Every failure is reported as a :mod:`wagate.whatsapp.errors` class, and the split between
:class:`NotDelivered` and :class:`Unconfirmed` follows where the request got to: aiohttp raises
``ClientConnectorError`` / ``ConnectionTimeoutError`` only before anything was written (the connect
timeout also covers waiting for a free pooled connection), and everything after that point may
have reached Meta. No total timeout is used, because when a total timeout fires aiohttp cannot say
in which phase it was.

The access token is only ever placed in the Authorization header: it is not logged and does not
appear in any exception text.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from wagate.whatsapp.errors import NotDelivered, Unconfirmed, UpstreamError, error_from_response
from wagate.whatsapp.payloads import SendResult, TemplateRecord

log = logging.getLogger(__name__)
TEMPLATE_FIELDS = "name,language,status,category,parameter_format,components,id"
# A listing that never ends (a broken cursor) must not loop forever.
MAX_TEMPLATE_PAGES = 1000


class CloudApiClient:
    """Calls ``{base_url}/{phone_number_id}/messages`` and ``{base_url}/{waba_id}/message_templates``.

    One instance per event loop: the aiohttp sessions are created lazily inside the running loop and
    must be closed with :meth:`close` in that same loop. Urgent sends (single messages, OTPs) have a
    session and connection pool of their own, so they never queue for a connection behind a batch.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 15.0,
        connect_timeout: float | None = None,
        # Open calls at once: Meta answers in a few hundred milliseconds, so a channel at 1000/s keeps
        # about 300 calls open; fewer connections would cap its rate at pool_limit / latency.
        pool_limit: int = 1000,
        urgent_pool_limit: int = 20,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.connect_timeout = connect_timeout if connect_timeout is not None else min(timeout, 10.0)
        self.pool_limits = {False: pool_limit, True: urgent_pool_limit}
        self._sessions: dict[bool, aiohttp.ClientSession] = {}  # by urgency
        self._loop: asyncio.AbstractEventLoop | None = None

    def _get_session(self, urgent: bool = False) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._sessions, self._loop = {}, loop
        session = self._sessions.get(urgent)
        if session is None or session.closed:
            limit = self.pool_limits[urgent]
            connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit)
            session = self._sessions[urgent] = aiohttp.ClientSession(
                connector=connector,
                trace_configs=[_SENT_TRACE],
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=self.connect_timeout,
                    sock_connect=self.connect_timeout,
                    sock_read=self.timeout,
                ),
                # JSON is encoded with orjson; aiohttp's own serializer is never used.
                raise_for_status=False,
            )
        return session

    async def close(self) -> None:
        sessions, self._sessions, self._loop = self._sessions, {}, None
        for session in sessions.values():
            if not session.closed:
                await session.close()

    async def __aenter__(self) -> CloudApiClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def send_message(
        self,
        phone_number_id: str,
        access_token: str,
        body: dict[str, Any],
        *,
        urgent: bool = False,
        on_sent: Callable[[], None] | None = None,
    ) -> SendResult:
        """Send one message; returns Meta's wamid or raises an :class:`UpstreamError`.

        `on_sent` is called once the request has been written to the connection: from then on Meta
        may have it (the pacing counts it from that moment).
        """
        url = f"{self.base_url}/{phone_number_id}/messages"
        data = orjson.dumps(body)
        status, payload = await self._request("POST", url, access_token, data, urgent=urgent, on_sent=on_sent)
        if status != 200:
            raise error_from_response(status, payload)
        try:
            return SendResult.from_dict(payload)
        except ValueError as exc:
            # A 200 without a wamid: Meta probably accepted the message, so this is not a failure.
            raise Unconfirmed(f"Unusable reply from the WhatsApp Cloud API: {exc}", http_status=200) from None

    async def list_templates(
        self, waba_id: str, access_token: str, *, page_size: int = 100
    ) -> list[TemplateRecord]:
        """Every template of the WABA, following ``paging.next`` until the last page."""
        url: str | None = (
            f"{self.base_url}/{waba_id}/message_templates?fields={TEMPLATE_FIELDS}&limit={int(page_size)}"
        )
        records: list[TemplateRecord] = []
        pages = 0
        while url is not None:
            pages += 1
            if pages > MAX_TEMPLATE_PAGES:
                raise Unconfirmed("Template listing did not end", http_status=200)
            status, payload = await self._request("GET", url, access_token, None)
            if status != 200:
                raise error_from_response(status, payload)
            if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
                raise Unconfirmed("Unusable template listing from the WhatsApp Cloud API", http_status=200)
            for item in payload["data"]:
                if isinstance(item, dict):
                    try:
                        records.append(TemplateRecord.from_dict(item))
                    except ValueError:
                        continue  # one broken item should not hide every other template
            paging = payload.get("paging")
            next_url = paging.get("next") if isinstance(paging, dict) else None
            url = next_url if isinstance(next_url, str) and next_url else None
            if url is not None and _origin(url) != _origin(self.base_url):
                # The access token goes with every page: only ever to the Graph API we were given.
                # Logged without the URL's path and query, which may carry the token.
                log.error(
                    "the template listing of WABA %s points its next page at %s, not at the Graph API "
                    "(%s): not followed, the sync fails",
                    waba_id,
                    _origin_text(url),
                    _origin_text(self.base_url),
                )
                raise Unconfirmed(
                    "Template listing's next page is not on the Graph API host", http_status=200
                )
        return records

    async def _request(
        self,
        method: str,
        url: str,
        access_token: str,
        data: bytes | None,
        *,
        urgent: bool = False,
        on_sent: Callable[[], None] | None = None,
    ) -> tuple[int, Any]:
        """Return (status, parsed JSON or None); map transport failures to NotDelivered/Unconfirmed."""
        session = self._get_session(urgent)
        headers = {"Authorization": f"Bearer {access_token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            # A guard above connect+read, for a server that trickles bytes forever; if it fires we
            # were connected (the connect timeout is shorter), so the outcome is unconfirmed.
            async with asyncio.timeout(self.connect_timeout + self.timeout + 5.0):
                async with session.request(
                    method, url, data=data, headers=headers, trace_request_ctx=_Sent(on_sent)
                ) as response:
                    raw = await response.read()
                    status = response.status
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            raise NotDelivered(_describe(exc, "Could not connect to the WhatsApp Cloud API")) from None
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise Unconfirmed(f"No reply from the WhatsApp Cloud API within {self.timeout:g} s") from None
        except aiohttp.InvalidURL:
            raise NotDelivered("Invalid WhatsApp Cloud API URL") from None
        except aiohttp.ClientError as exc:
            raise Unconfirmed(_describe(exc, "Connection to the WhatsApp Cloud API failed")) from None
        try:
            payload: Any = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            payload = None
        if status == 200 and payload is None:
            raise Unconfirmed("Unreadable reply from the WhatsApp Cloud API", http_status=200)
        return status, payload


class _Sent:
    """A request's `on_sent` callback, called at most once (a body may be written in chunks)."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], None] | None) -> None:
        self.callback = callback

    def __call__(self) -> None:
        callback, self.callback = self.callback, None
        if callback is not None:
            callback()


async def _on_chunk_sent(
    _session: aiohttp.ClientSession, context: SimpleNamespace, _params: aiohttp.TraceRequestChunkSentParams
) -> None:
    sent = context.trace_request_ctx
    if isinstance(sent, _Sent):
        sent()


_SENT_TRACE = aiohttp.TraceConfig()
_SENT_TRACE.on_request_chunk_sent.append(_on_chunk_sent)
_SENT_TRACE.freeze()


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a URL, the port filled in from the scheme; None when it has none."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return (
        parts.scheme.lower(),
        parts.hostname,
        port or {"http": 80, "https": 443}.get(parts.scheme.lower(), 0),
    )


def _origin_text(url: str) -> str:
    origin = _origin(url)
    return f"{origin[0]}://{origin[1]}:{origin[2]}" if origin else "an unparsable URL"


def _describe(exc: BaseException, prefix: str) -> str:
    # The exception's own text names host and OS error, never request headers, so it is safe to show.
    detail = str(exc).strip()
    return f"{prefix}: {type(exc).__name__}" + (f" ({detail})" if detail else "")


__all__ = ["TEMPLATE_FIELDS", "CloudApiClient", "UpstreamError"]
