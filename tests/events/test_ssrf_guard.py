"""The SSRF guard (issue 9, item 7): only globally routable addresses, short answers shown only from
them, and the access token never sent to another host than the Graph API's.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from support.harness import Gateway, new_number
from wagate.events import http as events_http
from wagate.events.http import RESPONSE_EXCERPT, EventPoster, public_addresses
from wagate.events.urls import forbidden_address
from wagate.simulator.server import RunningServer, run_in_thread
from wagate.whatsapp.client import CloudApiClient
from wagate.whatsapp.errors import UpstreamError

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}

NOT_PUBLIC = [
    "100.64.0.1",  # shared address space (carrier-grade NAT; some clouds' metadata endpoints)
    "100.100.100.200",
    "100.127.255.254",
    "192.0.0.1",  # IETF protocol assignments
    "198.18.0.1",  # benchmarking
    "198.51.100.7",  # documentation
    "203.0.113.7",
    "240.0.0.1",  # reserved
    "0.1.2.3",
    "255.255.255.255",
    "224.0.0.1",  # multicast
    "127.0.0.1",
    "10.1.2.3",
    "169.254.169.254",
    "::1",
    "fc00::1",
    "fe80::1",
    "ff02::1",
    "2001:db8::1",
    "::ffff:100.64.0.1",  # v4-mapped
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "64:ff9b::6440:1",  # NAT64 of 100.64.0.1
    "64:ff9b:1::1",  # local-use NAT64
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "fec0::1",  # deprecated site-local
    "4000::1",  # unallocated
]
PUBLIC = ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_addresses_that_are_not_globally_routable_are_forbidden(address: str) -> None:
    assert forbidden_address(address)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address: str) -> None:
    assert not forbidden_address(address)


@pytest.mark.parametrize("host", ["100.64.0.1", "100.100.100.200", "198.18.0.1", "192.0.0.1"])
def test_a_url_into_the_shared_address_space_is_invalid_url(gateway: Gateway, host: str) -> None:
    number = new_number()
    url = f"http://{host}/latest/meta-data"
    send = gateway.send({"phone_number": number, "template": OTP, "status_callback": {"url": url}})
    assert send.status_code == 422, send.text
    assert send.json()["error"]["code"] == "invalid_url"
    assert send.json()["error"]["details"][0]["field"] == "status_callback.url"
    assert gateway.sim.messages(to=number) == []
    hook = gateway.http.post(gateway.v1("/webhooks"), json={"url": url}, headers=gateway.headers())
    assert hook.status_code == 422 and hook.json()["error"]["code"] == "invalid_url", hook.text


def test_the_delivery_resolver_drops_what_the_guard_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DNS answer that changed after the URL was checked: the connection still only goes public."""

    def resolve(*addresses: str) -> list[str]:
        async def getaddrinfo(self: Any, host: str, port: int, **_: Any) -> list[Any]:
            family = {4: socket.AF_INET, 6: socket.AF_INET6}
            return [(family[6 if ":" in a else 4], socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses]

        async def run() -> list[str]:
            loop = asyncio.get_running_loop()
            monkeypatch.setattr(type(loop), "getaddrinfo", getaddrinfo)
            return await public_addresses("hook.example", 443)

        return asyncio.run(run())

    with pytest.raises(OSError, match="not public"):
        resolve("100.64.0.1", "198.18.0.1", "::1")
    assert resolve("100.64.0.1", "93.184.215.14", "fc00::1", "2606:4700:4700::1111") == [
        "93.184.215.14",
        "2606:4700:4700::1111",
    ]


def test_a_name_that_resolves_to_loopback_is_never_connected_to(talkative: RunningServer) -> None:
    """Without WAGATE_ALLOW_PRIVATE_URLS a name for a private address fails before any connection."""
    url = talkative.base_url.replace("127.0.0.1", "localhost") + "/hook"
    result = post_to(url, allow_private=False)
    assert result.status_code is None and result.error is not None
    assert "resolves only to addresses that are not public" in result.error, result.error


def test_a_url_with_a_shared_address_literal_is_not_posted_to(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_connection(*_: Any, **__: Any) -> None:
        raise AssertionError("the poster was about to connect")

    monkeypatch.setattr(EventPoster, "_pool", no_connection)

    async def post() -> events_http.PostResult:
        poster = EventPoster(allow_private=False, timeout=1.0)
        try:
            return await poster.post("http://100.64.0.1:9/hook", b"{}", {})
        finally:
            await poster.close()

    result = asyncio.run(post())
    assert result.status_code is None and result.error == "100.64.0.1 is not a public address"


# --- what a receiver answered, as shown with the attempt ---


@pytest.fixture(scope="module")
def talkative() -> Iterator[RunningServer]:
    """A receiver that answers 500 with a long body holding a NUL."""

    async def handle(_: Request) -> Response:
        return Response(b"secret\x00" + "é".encode() * 5000, status_code=500)

    with run_in_thread(Starlette(routes=[Route("/hook", handle, methods=["POST"])])) as server:
        yield server


def post_to(url: str, *, allow_private: bool) -> events_http.PostResult:
    async def post() -> events_http.PostResult:
        poster = EventPoster(allow_private=allow_private)
        try:
            return await poster.post(url, b"{}", {"content-type": "application/json"})
        finally:
            await poster.close()

    return asyncio.run(post())


def test_an_answer_from_a_private_address_is_not_shown_even_where_posting_is_allowed(
    talkative: RunningServer,
) -> None:
    result = post_to(talkative.base_url + "/hook", allow_private=True)
    assert (result.status_code, result.error, result.response) == (500, "HTTP 500", None)


def test_an_answer_from_a_public_address_is_shown_short_and_clean(
    talkative: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loopback stands in for a public address here (tests reach nothing else).
    monkeypatch.setattr(events_http, "forbidden_address", lambda address: False)
    result = post_to(talkative.base_url + "/hook", allow_private=False)
    assert result.status_code == 500 and result.response is not None
    assert len(result.response) == RESPONSE_EXCERPT == 256
    assert result.response.startswith("secret\ufffdéé") and "\x00" not in result.response


# --- the template sync's paging ---


class Elsewhere:
    """A server on another loopback port that records every request and its Authorization header."""

    def __init__(self) -> None:
        self.calls: list[str | None] = []
        self._lock = threading.Lock()

        async def handle(request: Request) -> Response:
            with self._lock:
                self.calls.append(request.headers.get("authorization"))
            return JSONResponse({"data": []})

        self.server = run_in_thread(Starlette(routes=[Route("/{path:path}", handle)]))


class Graph:
    """A Graph API whose template listing's `paging.next` points wherever the test says."""

    def __init__(self) -> None:
        self.next_url = ""

        async def templates(request: Request) -> Response:
            if request.query_params.get("after") == "2":
                return JSONResponse({"data": [template("second_page")]})
            return JSONResponse({"data": [template("first_page")], "paging": {"next": self.next_url}})

        routes = [Route("/v23.0/{waba}/message_templates", templates)]
        self.server = run_in_thread(Starlette(routes=routes))

    @property
    def url(self) -> str:
        return self.server.base_url + "/v23.0"


def template(name: str) -> dict[str, Any]:
    return {"name": name, "language": "en", "status": "APPROVED", "category": "UTILITY", "components": []}


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Graph, Elsewhere]]:
    graph, elsewhere = Graph(), Elsewhere()
    try:
        yield graph, elsewhere
    finally:
        graph.server.stop()
        elsewhere.server.stop()


def list_templates(graph: Graph) -> list[str]:
    async def run() -> list[str]:
        async with CloudApiClient(graph.url, timeout=5.0) as client:
            return [r.name for r in await client.list_templates("waba-1", "EAAG-secret-token")]

    return asyncio.run(run())


def test_the_template_sync_follows_paging_only_on_the_graph_api(
    servers: tuple[Graph, Elsewhere], caplog: pytest.LogCaptureFixture
) -> None:
    graph, elsewhere = servers
    graph.next_url = f"{graph.url}/waba-1/message_templates?after=2"
    assert list_templates(graph) == ["first_page", "second_page"]

    for foreign in (
        f"{elsewhere.server.base_url}/v23.0/waba-1/message_templates?after=2&access_token=EAAG-secret-token",
        graph.url.replace("127.0.0.1", "localhost") + "/waba-1/message_templates?after=2",
        graph.url.replace("http://", "https://") + "/waba-1/message_templates?after=2",
        "http://[::1/broken",
    ):
        graph.next_url = foreign
        with pytest.raises(UpstreamError):
            list_templates(graph)
    assert elsewhere.calls == []
    assert "not followed" in caplog.text and "EAAG-secret-token" not in caplog.text
