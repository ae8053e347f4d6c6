"""The adapter against the simulator (and a few deliberately broken servers), over real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from wagate.simulator import (
    MAGIC_RATE_LIMITED,
    MAGIC_SERVER_ERROR,
    MAGIC_SLOW,
    RunningServer,
    SimulatorConfig,
    create_simulator_app,
    run_in_thread,
)
from wagate.simulator.templates import SEED_TEMPLATES
from wagate.whatsapp.client import CloudApiClient
from wagate.whatsapp.errors import (
    AuthError,
    InvalidParameterError,
    NotDelivered,
    TemplateError,
    ThrottlingError,
    Unconfirmed,
    UpstreamError,
    is_retryable,
)
from wagate.whatsapp.http1 import Written
from wagate.whatsapp.outbound import (
    SendResult,
    authentication_components,
    body_component,
    header_component,
    template_message,
    text_message,
    text_parameter,
    url_button_component,
)

PHONE_NUMBER_ID = "106540352242922"
TO = "994501234567"
TOKEN = "token"
T = TypeVar("T")


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningServer]:
    config = SimulatorConfig(webhook_url=None, slow_response_seconds=3.0, auto_statuses=False)
    with run_in_thread(create_simulator_app(config)) as server:
        yield server


@pytest.fixture(autouse=True)
def reset(sim: RunningServer) -> None:
    httpx.post(sim.base_url + "/_sim/reset").raise_for_status()


def call(base_url: str, fn: Callable[[CloudApiClient], Awaitable[T]], timeout: float = 5.0) -> T:
    async def run() -> T:
        async with CloudApiClient(base_url, timeout=timeout) as client:
            return await fn(client)

    return asyncio.run(run())


def send(sim: RunningServer, body: dict[str, Any], token: str = TOKEN, timeout: float = 5.0) -> SendResult:
    return call(sim.base_url + "/v23.0", lambda c: c.send_message(PHONE_NUMBER_ID, token, body), timeout)


def test_text_and_templates_get_wamids(sim: RunningServer) -> None:
    bodies = [
        text_message(TO, "Hello", "msg_1"),
        template_message(TO, "otp_code", "en", authentication_components("482913"), "msg_2"),
        template_message(
            TO, "order_update", "az", [body_component([text_parameter("A-1"), text_parameter("ok")])]
        ),
        template_message(
            TO,
            "spring_sale",
            "en",
            [
                header_component([text_parameter("20% off")]),
                body_component([text_parameter("20%")]),
                url_button_component(0, "spring"),
            ],
        ),
        template_message(
            TO,
            "welcome_named",
            "en",
            [body_component([text_parameter("Ann", "first_name"), text_parameter("A-7", "order_id")])],
        ),
        template_message(TO, "filler_007", "en"),
    ]
    results = [send(sim, body) for body in bodies]
    assert all(r.wamid.startswith("wamid.") and r.wa_id == TO for r in results)
    assert len({r.wamid for r in results}) == len(results)
    log = httpx.get(sim.base_url + "/_sim/messages").json()["data"]
    assert [entry["wamid"] for entry in log] == [r.wamid for r in results]
    assert log[1]["body"] == bodies[1]
    assert log[1]["biz_opaque_callback_data"] == "msg_2"


def test_unknown_template_is_132001_with_404(sim: RunningServer) -> None:
    with pytest.raises(TemplateError) as info:
        send(sim, template_message(TO, "no_such_template", "en"))
    assert info.value.code == 132001
    assert info.value.http_status == 404
    assert info.value.external_error == "132001: Template name does not exist in the translation"
    assert not is_retryable(info.value)


def test_not_approved_template_is_132001(sim: RunningServer) -> None:
    with pytest.raises(TemplateError) as info:
        send(sim, template_message(TO, "new_feature", "en"))
    assert info.value.code == 132001


def test_wrong_parameter_count_is_132000(sim: RunningServer) -> None:
    with pytest.raises(TemplateError) as info:
        send(sim, template_message(TO, "order_update", "en", [body_component([text_parameter("A-1")])]))
    assert info.value.code == 132000
    assert info.value.http_status == 400


def test_authentication_template_without_button_parameter_is_rejected(sim: RunningServer) -> None:
    body = template_message(TO, "otp_code", "en", [body_component([text_parameter("482913")])])
    with pytest.raises(InvalidParameterError) as info:
        send(sim, body)
    assert info.value.code == 131008
    assert "Button at index 0" in (info.value.details or "")


def test_magic_rate_limited_is_retryable_throttling(sim: RunningServer) -> None:
    with pytest.raises(ThrottlingError) as info:
        send(sim, text_message(MAGIC_RATE_LIMITED, "hi"))
    assert info.value.code == 130429
    assert info.value.external_error == "130429: Rate limit hit"
    assert is_retryable(info.value)


def test_server_error_is_unconfirmed(sim: RunningServer) -> None:
    with pytest.raises(Unconfirmed) as info:
        send(sim, text_message(MAGIC_SERVER_ERROR, "hi"))
    assert info.value.http_status == 500
    assert not is_retryable(info.value)


def test_slow_reply_is_unconfirmed_but_the_message_was_sent(sim: RunningServer) -> None:
    with pytest.raises(Unconfirmed):
        send(sim, text_message(MAGIC_SLOW, "hi", "msg_slow"), timeout=0.3)
    log = httpx.get(sim.base_url + "/_sim/messages", params={"to": MAGIC_SLOW}).json()["data"]
    assert [entry["biz_opaque_callback_data"] for entry in log] == ["msg_slow"]


def test_bad_token_is_auth_error(sim: RunningServer) -> None:
    httpx.post(sim.base_url + "/_sim/config", json={"access_tokens": ["good"]}).raise_for_status()
    with pytest.raises(AuthError) as info:
        send(sim, text_message(TO, "hi"), token="bad")
    assert (info.value.code, info.value.http_status) == (190, 401)
    assert "bad" not in str(info.value)
    assert send(sim, text_message(TO, "hi"), token="good").wamid


def test_fail_next_injects_errors_in_order(sim: RunningServer) -> None:
    httpx.post(
        sim.base_url + "/_sim/config", json={"fail_next": {"count": 2, "code": 503}}
    ).raise_for_status()
    for _ in range(2):
        with pytest.raises(Unconfirmed):
            send(sim, text_message(TO, "hi"))
    assert send(sim, text_message(TO, "hi")).wamid


def test_connection_refused_is_not_delivered() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port any more.
    with pytest.raises(NotDelivered) as info:
        call(f"http://127.0.0.1:{port}/v23.0", lambda c: c.send_message(PHONE_NUMBER_ID, "secret-token", {}))
    assert is_retryable(info.value)
    assert "secret-token" not in str(info.value) and "secret-token" not in repr(info.value)


def test_list_templates_follows_paging(sim: RunningServer) -> None:
    records = call(sim.base_url + "/v23.0", lambda c: c.list_templates("waba-1", "token", page_size=10))
    names = [(r.name, r.language) for r in records]
    assert len(names) == len(SEED_TEMPLATES) == len(set(names))
    by_name = {(r.name, r.language): r for r in records}
    otp = by_name[("otp_code", "en")]
    assert (otp.category, otp.status, otp.parameter_format) == ("AUTHENTICATION", "APPROVED", "POSITIONAL")
    assert by_name[("welcome_named", "en")].parameter_format == "NAMED"
    assert by_name[("old_promo", "en")].status == "REJECTED"
    assert ("order_update", "az") in by_name
    assert all(r.id for r in records)


def _odd_server(status: int, body: bytes) -> Starlette:
    async def handler(request: Request) -> Response:
        return Response(body, status_code=status, media_type="application/json")

    return Starlette(routes=[Route("/v23.0/{path:path}", handler, methods=["GET", "POST"])])


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, b"<html>not json</html>", Unconfirmed),
        (200, b'{"messaging_product":"whatsapp","messages":[]}', Unconfirmed),
        (429, b"", ThrottlingError),
        (502, b"Bad gateway", Unconfirmed),
    ],
)
def test_odd_replies(status: int, body: bytes, expected: type[Exception]) -> None:
    with run_in_thread(_odd_server(status, body)) as server, pytest.raises(expected):
        call(server.base_url + "/v23.0", lambda c: c.send_message(PHONE_NUMBER_ID, "t", {}))


def _port_echo_server() -> Starlette:
    """Answers a send with a wamid naming the client's port: which connection carried the call."""

    async def handler(request: Request) -> Response:
        port = request.client.port if request.client else 0
        body = b'{"messaging_product":"whatsapp","messages":[{"id":"wamid.%d"}]}' % port
        return Response(body, media_type="application/json")

    return Starlette(routes=[Route("/v23.0/{path:path}", handler, methods=["POST"])])


def test_one_connection_is_kept_alive_across_calls_and_closed_with_the_client() -> None:
    async def run() -> list[str]:
        async with CloudApiClient(server.base_url + "/v23.0") as client:
            wamids = [
                (await client.send_message(PHONE_NUMBER_ID, "t", text_message(TO, text))).wamid
                for text in ("a", "b", "c")
            ]
            pool = client._pool()
            assert len(pool.idle) == 1
        assert pool.closed and not pool.idle and all(c.closed for c in [*pool.idle, *pool.busy])
        return wamids

    with run_in_thread(_port_echo_server()) as server:
        wamids = asyncio.run(run())
    assert len(set(wamids)) == 1, wamids  # every call on the same connection (one client port)


async def answer_one_send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, wamid: str) -> None:
    """A minimal Cloud API on a raw stream: read one request (head and Content-Length body), answer a
    send with `wamid`, keep the connection open."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    await reader.readexactly(length)
    body = b'{"messaging_product":"whatsapp","messages":[{"id":"%s"}]}' % wamid.encode()
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()


def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    """A server that answers as keep-alive, then closes the connection while it is idle: the next call
    opens another connection instead of writing into the closed one (whose outcome would be unknown:
    Unconfirmed, and the message never sent again)."""
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await answer_one_send(reader, writer, f"wamid.{connections}")
        await asyncio.sleep(0.05)
        writer.close()  # idle, and gone

    async def run() -> list[str]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, CloudApiClient(f"http://127.0.0.1:{port}/v23.0") as client:
            wamids = []
            for text in ("a", "b", "c"):
                wamids.append((await client.send_message(PHONE_NUMBER_ID, "t", text_message(TO, text))).wamid)
                await asyncio.sleep(0.2)
            return wamids

    assert asyncio.run(run()) == ["wamid.1", "wamid.2", "wamid.3"]


def test_an_urgent_send_does_not_queue_for_a_connection_behind_bulk_ones(sim: RunningServer) -> None:
    """Every pooled connection of the bulk session is held by a slow call and one more waits for them;
    an urgent send (an OTP) has a pool of its own and is answered at once."""

    async def run() -> tuple[float, list[bool]]:
        async with CloudApiClient(sim.base_url + "/v23.0", pool_limit=2, urgent_pool_limit=1) as client:
            bulk = [
                asyncio.create_task(client.send_message(PHONE_NUMBER_ID, TOKEN, text_message(number, "b")))
                for number in (MAGIC_SLOW, MAGIC_SLOW, TO)
            ]
            await asyncio.sleep(0.3)  # the slow calls hold both connections; the third waits
            began = time.monotonic()
            result = await client.send_message(PHONE_NUMBER_ID, TOKEN, text_message(TO, "otp"), urgent=True)
            took = time.monotonic() - began
            assert result.wamid
            done = [task.done() for task in bulk]
            await asyncio.gather(*bulk)
            return took, done

    took, bulk_done = asyncio.run(run())
    assert bulk_done == [False, False, False]  # still waiting when the urgent send was answered
    assert took < 1.0, took


def test_written_tells_when_the_request_left_before_the_answer_came(sim: RunningServer) -> None:
    """The pacing counts a send from when its request was written: for a slow answer, well before it."""

    async def run() -> tuple[Written, float, float]:
        written = Written()
        async with CloudApiClient(sim.base_url + "/v23.0", timeout=5.0) as client:
            began = time.monotonic()
            await client.send_message(PHONE_NUMBER_ID, TOKEN, text_message(MAGIC_SLOW, "hi"), written=written)
            return written, began, time.monotonic()

    httpx.post(sim.base_url + "/_sim/config", json={"slow_response_seconds": 1.0}).raise_for_status()
    try:
        written, began, answered = asyncio.run(run())
    finally:
        httpx.post(sim.base_url + "/_sim/config", json={"slow_response_seconds": 3.0}).raise_for_status()
    assert written.at is not None
    assert written.at - began < 0.5 and answered - written.at >= 0.9


def test_written_is_not_told_when_nothing_was_sent() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    written = Written()
    with pytest.raises(NotDelivered):
        call(
            f"http://127.0.0.1:{port}/v23.0",
            lambda c: c.send_message(PHONE_NUMBER_ID, "t", {}, written=written),
        )
    assert written.at is None


def test_fail_next_can_target_one_recipient(sim: RunningServer) -> None:
    other = "994551234567"
    target = {"count": 1, "code": 500, "to": "+" + other}
    httpx.post(sim.base_url + "/_sim/config", json={"fail_next": target}).raise_for_status()
    assert send(sim, text_message(TO, "not targeted")).wamid
    with pytest.raises(Unconfirmed):
        send(sim, text_message(other, "targeted"))
    assert send(sim, text_message(other, "used up")).wamid


def _self_signed(tmp_path: Any) -> tuple[str, str]:
    """A certificate for 127.0.0.1 (and its key), signed by itself: files for a TLS server and, as the
    trusted roots, for the client."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "graph.test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(cert_path), str(key_path)


def test_https_is_verified_and_kept_alive(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Meta is reached over TLS: a certificate the client trusts carries the calls (on one
    connection); one it does not trust is refused before anything is written (NotDelivered)."""
    cert, key = _self_signed(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            while True:  # keep-alive: one answer after another on this connection
                await answer_one_send(reader, writer, f"wamid.{connections}")
        writer.close()

    async def run() -> tuple[list[str], UpstreamError]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_tls)
        port = server.sockets[0].getsockname()[1]
        async with server:
            monkeypatch.setenv("SSL_CERT_FILE", cert)  # the client's trusted roots: this certificate
            async with CloudApiClient(f"https://127.0.0.1:{port}/v23.0") as client:
                wamids = [
                    (await client.send_message(PHONE_NUMBER_ID, "t", text_message(TO, text))).wamid
                    for text in ("a", "b")
                ]
            monkeypatch.delenv("SSL_CERT_FILE")  # the system's roots: they do not know it
            written = Written()
            async with CloudApiClient(f"https://127.0.0.1:{port}/v23.0") as client:
                with pytest.raises(NotDelivered) as refused:
                    await client.send_message(PHONE_NUMBER_ID, "t", text_message(TO, "c"), written=written)
            assert written.at is None
            return wamids, refused.value

    wamids, refused = asyncio.run(run())
    assert wamids == ["wamid.1", "wamid.1"]
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused), refused
