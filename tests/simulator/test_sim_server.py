"""The generic background-server helpers that the gateway's tests and `serve --sandbox` reuse."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from wagate.simulator import create_simulator_app, run_in_thread, serve_in_background, start_in_thread
from wagate.simulator.server import RunningServer, base_url_of


def hello_app(events: list[str] | None = None) -> Starlette:
    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if events is not None:
            events.append("startup")
        yield
        if events is not None:
            events.append("shutdown")

    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    return Starlette(routes=[Route("/", hello)], lifespan=lifespan)


def test_start_in_thread_serves_and_stops_cleanly() -> None:
    threads_before = set(threading.enumerate())
    events: list[str] = []
    base_url, stop = start_in_thread(hello_app(events))
    assert base_url.startswith("http://127.0.0.1:")
    assert not base_url.endswith(":0")
    assert httpx.get(base_url + "/").text == "hello"
    stop()
    stop()  # idempotent
    assert events == ["startup", "shutdown"]
    assert set(threading.enumerate()) <= threads_before
    with pytest.raises(httpx.ConnectError):
        httpx.get(base_url + "/")


def test_same_port_can_be_served_again_after_stop() -> None:
    with run_in_thread(hello_app()) as first:
        port = first.port
        assert first.running
    with run_in_thread(hello_app(), port=port) as second:
        assert httpx.get(second.base_url + "/").text == "hello"


def test_startup_failure_raises_instead_of_hanging() -> None:
    @asynccontextmanager
    async def broken(_: Starlette) -> AsyncIterator[None]:
        raise RuntimeError("database unreachable")
        yield

    with pytest.raises(RuntimeError, match="failed to start"):
        RunningServer(Starlette(lifespan=broken)).start()


def test_serve_in_background_inside_a_running_loop() -> None:
    async def run() -> str:
        server, task = await serve_in_background(create_simulator_app())
        try:
            async with httpx.AsyncClient() as client:
                response = await client.get(base_url_of(server) + "/_sim/config")
                return str(response.json()["webhook_url"])
        finally:
            server.should_exit = True
            await task

    assert asyncio.run(run()) == "None"


def test_serve_in_background_reports_startup_failure() -> None:
    @asynccontextmanager
    async def broken(_: Starlette) -> AsyncIterator[None]:
        raise RuntimeError("boom")
        yield

    async def run() -> None:
        await serve_in_background(Starlette(lifespan=broken))

    with pytest.raises(RuntimeError, match="failed to start"):
        asyncio.run(run())
