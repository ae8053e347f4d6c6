"""The Cloud API adapter: Meta's own JSON over keep-alive HTTP/1.1 connections (wagate.whatsapp.http1).

Every failure is reported as a :mod:`wagate.whatsapp.errors` class, and the split between
:class:`NotDelivered` and :class:`Unconfirmed` follows where the request got to: `ConnectFailed`
(no free connection or no connection within the connect timeout, the connect refused) means nothing
was written; after that point (`ExchangeFailed`: the connection broke, no complete answer within the
timeout) Meta may have the request.

The access token is only ever placed in the Authorization header: it is not logged and does not
appear in any exception text.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit

import orjson

from wagate.whatsapp.errors import NotDelivered, Unconfirmed, UpstreamError, error_from_response
from wagate.whatsapp.http1 import (
    ConnectFailed,
    ExchangeFailed,
    Http1Pool,
    InvalidTarget,
    Written,
    request_target,
)
from wagate.whatsapp.outbound import SendResult, TemplateRecord

log = logging.getLogger(__name__)
TEMPLATE_FIELDS = "name,language,status,category,parameter_format,components,id,quality_score,rejected_reason"
# A listing that never ends (a broken cursor) must not loop forever.
MAX_TEMPLATE_PAGES = 1000


class CloudApiClient:
    """Calls ``{base_url}/{phone_number_id}/messages`` and ``{base_url}/{waba_id}/message_templates``.

    One instance per event loop: the connection pools are created lazily inside the running loop and
    must be closed with :meth:`close` in that same loop. Urgent sends (single messages, OTPs) have a
    connection pool of their own, so they never queue for a connection behind a batch.
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
        self._pools: dict[bool, Http1Pool] = {}  # by urgency
        self._loop: asyncio.AbstractEventLoop | None = None

    def _pool(self, urgent: bool = False) -> Http1Pool:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._pools, self._loop = {}, loop
        pool = self._pools.get(urgent)
        if pool is None or pool.closed:
            pool = self._pools[urgent] = Http1Pool(
                self.base_url,
                limit=self.pool_limits[urgent],
                connect_timeout=self.connect_timeout,
                timeout=self.timeout,
            )
        return pool

    async def close(self) -> None:
        pools, self._pools, self._loop = self._pools, {}, None
        for pool in pools.values():
            pool.close()

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
        written: Written | None = None,
    ) -> SendResult:
        """Send one message; returns Meta's wamid or raises an :class:`UpstreamError`.

        `written` is told when the request has been written to the connection: from then on Meta
        may have it (the pacing counts it from that moment).
        """
        url = f"{self.base_url}/{phone_number_id}/messages"
        data = orjson.dumps(body)
        status, payload = await self._request("POST", url, access_token, data, urgent=urgent, written=written)
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
        written: Written | None = None,
    ) -> tuple[int, Any]:
        """Return (status, parsed JSON or None); map transport failures to NotDelivered/Unconfirmed."""
        headers = {"Authorization": f"Bearer {access_token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            pool = self._pool(urgent)
            answer = await pool.exchange(method, request_target(url), headers, data, written=written)
            status, raw = answer.status, answer.body
        except InvalidTarget:
            raise NotDelivered("Invalid WhatsApp Cloud API URL") from None
        except ConnectFailed as exc:
            raise NotDelivered(f"Could not connect to the WhatsApp Cloud API: {exc}") from None
        except ExchangeFailed as exc:
            raise Unconfirmed(f"Connection to the WhatsApp Cloud API failed: {exc}") from None
        try:
            payload: Any = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            payload = None
        if status == 200 and payload is None:
            raise Unconfirmed("Unreadable reply from the WhatsApp Cloud API", http_status=200)
        return status, payload


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


__all__ = ["TEMPLATE_FIELDS", "CloudApiClient", "UpstreamError"]
