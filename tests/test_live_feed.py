"""The live changes the dashboard's pages are fed with (wagate.core.live), over real sockets: a send over
HTTP, its status webhooks, a customer's reply and an agent's Resolve reach a subscriber of the account
once committed; a unit rolled back publishes nothing; a subscriber that falls behind is reset; on
PostgreSQL what another process commits (a `wagate worker`, another hub) reaches this process's hub,
split into several notifications when it is large, and a process's own changes come once."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from support import gateway_process
from support.app_in_thread import gateway_in_this_loop, gateway_settings
from support.gateway_process import WAGATE, gateway_env, simulator_wiring, tail
from support.harness import ADMIN_TOKEN, MAIN, Simulator, new_number, provision_file
from wagate.accounts.callers import principal_for_token
from wagate.api.app import create_app
from wagate.conversations.models import ConversationStatus
from wagate.conversations.service import change_conversation_status
from wagate.core.db import Database
from wagate.core.live import LiveChange, LiveKind, record_live
from wagate.core.live_feed import LiveFeed
from wagate.core.live_hub import LiveHub
from wagate.core.live_payloads import PAYLOAD_LIMIT, decode_changes, encode_changes
from wagate.core.migrate import migrate
from wagate.ops.operations import run_provision
from wagate.ops.provisioning import ProvisionFile
from wagate.simulator.server import serve_in_background

pytestmark = pytest.mark.timeout(180)
TIMEOUT = 30.0  # generous: nothing here is timed, a change either comes or the test fails


@pytest.fixture
def postgres(database_url: str) -> str:
    if database_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only: on SQLite one process runs everything")
    return database_url


async def wait_change(
    feed: LiveFeed, matches: Callable[[LiveChange], bool], seen: list[LiveChange] | None = None
) -> LiveChange:
    """The next change that `matches` (the ones before it go to `seen`)."""
    async with asyncio.timeout(TIMEOUT):
        async for change in feed:
            if matches(change):
                return change
            if seen is not None:
                seen.append(change)
    raise AssertionError("the feed ended")


def marker(account_id: int, name: str) -> LiveChange:
    return LiveChange(account_id, 0, 0, LiveKind.conversation, message_id=name)


def recording(changes: list[LiveChange], *, fail: bool = False) -> Callable[[Session], None]:
    def unit(session: Session) -> None:
        session.execute(text("SELECT 1"))
        record_live(session, changes)
        if fail:
            raise ValueError("this unit fails after recording its changes")

    return unit


def test_changes_are_encoded_compactly_and_split_under_the_payload_limit() -> None:
    changes = [
        LiveChange(
            7,
            12,
            n,
            kind,
            inbound=kind == LiveKind.message and n % 2 == 0,
            conversation_status=[None, "open", "pending", "resolved"][n % 4],
            message_id=None if kind == LiveKind.conversation else f"msg_{n:026d}",
        )
        for n in range(600)
        for kind in (LiveKind.message, LiveKind.status, LiveKind.conversation)
    ]
    payloads = encode_changes("123.abcd", changes)
    assert len(payloads) > 1
    assert all(len(p.encode()) < PAYLOAD_LIMIT for p in payloads)
    decoded = []
    for payload in payloads:
        origin, part = decode_changes(payload)
        assert origin == "123.abcd"
        decoded += part
    assert decoded == changes
    with pytest.raises(ValueError):
        decode_changes("123.abcd|1,2,3,x,,")


def test_a_send_its_statuses_a_reply_and_a_resolve_reach_the_accounts_subscriber(
    database_url: str, simulator: Simulator
) -> None:
    number = new_number()

    async def scenario() -> None:
        async with (
            gateway_in_this_loop(database_url, simulator) as (url, gateway, ids),
            httpx.AsyncClient(base_url=f"{url}/v1/accounts/{ids['acme']}", timeout=10) as http,
            httpx.AsyncClient(base_url=simulator.url, timeout=10) as sim,
            gateway.live.subscribe(ids["acme"]) as feed,
            gateway.live.subscribe(ids["globex"]) as other_account,
        ):
            (
                await sim.post("/_sim/config", json={"webhook_url": f"{url}/webhooks/whatsapp"})
            ).raise_for_status()
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

            async def message(message_id: str) -> dict[str, Any]:
                got = await http.get(f"/whatsapp/messages/{message_id}", headers=headers)
                assert got.status_code == 200, got.text
                body: dict[str, Any] = got.json()
                return body

            sent = await http.post(
                "/whatsapp/messages",
                headers=headers,
                json={
                    "channel_id": ids["main"],
                    "phone_number": number,
                    "template": {"name": "otp_code", "language": "en", "parameters": ["4711"]},
                },
            )
            assert sent.status_code == 201, sent.text
            message_id = sent.json()["id"]
            conversation_id = (await message(message_id))["conversation"]["id"]
            created = await wait_change(feed, lambda c: c.message_id == message_id)
            assert created == LiveChange(
                ids["acme"],
                ids["main"],
                conversation_id,
                LiveKind.message,
                inbound=False,
                conversation_status="resolved",  # an API send resolves the conversation
                message_id=message_id,
            )

            # The simulator's status webhooks (sent, then delivered): each change that moves the
            # message is told once it is committed, so the API shows it when the change arrives.
            while True:
                status = await wait_change(feed, lambda c: c.message_id == message_id)
                assert status == LiveChange(
                    ids["acme"], ids["main"], conversation_id, LiveKind.status, message_id=message_id
                )
                if (await message(message_id))["status"] == "delivered":
                    break

            # The customer answers: an inbound message, and the conversation is open again.
            (
                await sim.post(
                    "/_sim/inbound",
                    json={"phone_number_id": MAIN["phone_number_id"], "from": number, "text": "thanks"},
                )
            ).raise_for_status()
            reply = await wait_change(feed, lambda c: c.inbound)
            assert reply.kind == LiveKind.message
            assert (reply.account_id, reply.channel_id, reply.conversation_id) == (
                ids["acme"],
                ids["main"],
                conversation_id,
            )
            assert reply.conversation_status == "open"
            assert reply.message_id is not None and reply.message_id.startswith("msg_")

            # An agent resolves it (the dashboard's button).
            agent = await principal_for_token(gateway.caches, ADMIN_TOKEN)
            await change_conversation_status(
                gateway, principal=agent, conversation_id=conversation_id, status=ConversationStatus.resolved
            )
            resolved = await wait_change(feed, lambda c: c.kind == LiveKind.conversation)
            assert resolved == LiveChange(
                ids["acme"],
                ids["main"],
                conversation_id,
                LiveKind.conversation,
                conversation_status="resolved",
            )

            # Nothing of Acme's reached Globex's subscriber: the first thing it gets is its own marker.
            await gateway.db.write(recording([marker(ids["globex"], "end")]))
            assert await wait_change(other_account, lambda c: True) == marker(ids["globex"], "end")

    with simulator_wiring(simulator):
        asyncio.run(scenario())


def test_a_unit_rolled_back_publishes_nothing(database_url: str) -> None:
    async def scenario() -> None:
        db = Database(database_url)
        hub = LiveHub(db)
        try:
            async with hub.subscribe(1) as feed:
                # Alone: its transaction rolls back.
                with pytest.raises(ValueError):
                    await db.write(recording([marker(1, "alone")], fail=True))
                # In a batch with others (they come in together and share a commit): the failing ones
                # roll back in their savepoints, the others commit and are told.
                writes = [db.write(recording([marker(1, f"unit {n}")], fail=n % 3 == 1)) for n in range(12)]
                results = await asyncio.gather(*writes, return_exceptions=True)
                assert [isinstance(r, ValueError) for r in results] == [n % 3 == 1 for n in range(12)]
                await db.write(recording([marker(1, "end")]))
                seen: list[LiveChange] = []
                await wait_change(feed, lambda c: c == marker(1, "end"), seen)
                assert seen == [marker(1, f"unit {n}") for n in range(12) if n % 3 != 1]
        finally:
            await hub.stop()
            await db.dispose()

    asyncio.run(scenario())


def test_a_subscriber_that_falls_behind_is_reset_and_goes_on(database_url: str) -> None:
    async def scenario() -> None:
        db = Database(database_url)
        hub = LiveHub(db, queue_limit=5)
        try:
            async with hub.subscribe(1) as slow, hub.subscribe(1) as quick:
                for n in range(8):
                    await db.write(recording([marker(1, f"change {n}")]))
                    assert await wait_change(quick, lambda c: True) == marker(1, f"change {n}")
                await db.write(recording([marker(1, "after")]))
                # The sixth change found five waiting: they and it are dropped for one `reset` (the
                # page reloads, and sees them all), and what comes after follows it.
                assert [await wait_change(slow, lambda c: True) for _ in range(3)] == [
                    LiveChange(1, 0, 0, LiveKind.reset),
                    marker(1, "change 6"),
                    marker(1, "change 7"),
                ]
                assert await wait_change(slow, lambda c: True) == marker(1, "after")
        finally:
            await hub.stop()
            await db.dispose()

    asyncio.run(scenario())


def test_changes_of_another_process_arrive_split_and_a_hubs_own_come_once(postgres: str) -> None:
    async def scenario() -> None:
        first, second = Database(postgres), Database(postgres)
        hubs = [LiveHub(first), LiveHub(second)]
        try:
            for hub in hubs:
                await hub.start()
                assert hub.listening
            async with hubs[0].subscribe(5) as here, hubs[1].subscribe(5) as there:
                # Far more than one notification holds (about 8000 bytes, some 150 of these).
                many = [
                    LiveChange(
                        5, 9, n, LiveKind.message, conversation_status="open", message_id=f"msg_{n:026d}"
                    )
                    for n in range(700)
                ]
                # A large unit (a bulk batch's) commits beside the group commit: told the same way.
                await first.write(recording([*many, marker(5, "first done")]), large=True)
                heard: list[LiveChange] = []
                await wait_change(there, lambda c: c == marker(5, "first done"), heard)
                assert heard == many
                # The other hub has heard all of it, so the first hub's own notifications came before
                # this one: it delivered its changes at the commit and skips them when it hears them.
                await second.write(recording([marker(5, "second done")]))
                assert await wait_change(there, lambda c: True) == marker(5, "second done")
                seen: list[LiveChange] = []
                await wait_change(here, lambda c: c == marker(5, "second done"), seen)
                assert seen == [*many, marker(5, "first done")]
        finally:
            for hub in hubs:
                await hub.stop()
            await first.dispose()
            await second.dispose()

    asyncio.run(scenario())


@asynccontextmanager
async def api_without_dispatcher(database_url: str, simulator: Simulator) -> AsyncIterator[tuple[str, Any]]:
    """`wagate serve --no-dispatcher` in this loop: its URL and the `Gateway` its handlers get."""
    app = create_app(
        gateway_settings(database_url, simulator, gateway_process.SECRET_KEY), run_dispatcher=False
    )
    server, task = await serve_in_background(app)
    try:
        yield f"http://127.0.0.1:{server.config.port}", app.state.gateway
    finally:
        server.should_exit = True
        await task


@pytest.fixture
def worker(postgres: str, simulator: Simulator, tmp_path: Path) -> Iterator[dict[str, int]]:
    """The database migrated and provisioned with the key the worker has, and a `wagate worker`
    running on it; yields Acme's and its Main channel's ids."""
    config = gateway_settings(postgres, simulator, gateway_process.SECRET_KEY)
    migrate(postgres)
    provisioned = asyncio.run(run_provision(config, ProvisionFile.model_validate(provision_file())))
    acme = next(a for a in provisioned["accounts"] if a["name"] == "Acme")
    ids = {
        "acme": acme["account_id"],
        "main": next(c for c in acme["channels"] if c["name"] == "Main")["channel_id"],
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(WAGATE), "worker"],
            env=gateway_env(postgres, simulator),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield ids
        assert process.poll() is None, f"the worker died:\n{tail(log_path)}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def test_what_a_worker_commits_reaches_the_api_processes_subscriber(
    postgres: str, simulator: Simulator, worker: dict[str, int]
) -> None:
    number = new_number()

    async def scenario() -> None:
        async with (
            api_without_dispatcher(postgres, simulator) as (url, gateway),
            httpx.AsyncClient(base_url=f"{url}/v1/accounts/{worker['acme']}", timeout=10) as http,
            httpx.AsyncClient(base_url=simulator.url, timeout=10) as sim,
            gateway.live.subscribe(worker["acme"]) as feed,
        ):
            (
                await sim.post("/_sim/config", json={"webhook_url": f"{url}/webhooks/whatsapp"})
            ).raise_for_status()
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            sent = await http.post(
                "/whatsapp/messages",
                headers=headers,
                json={
                    "channel_id": worker["main"],
                    "phone_number": number,
                    "template": {"name": "otp_code", "language": "en", "parameters": ["4711"]},
                },
            )
            assert sent.status_code == 201, sent.text
            message_id = sent.json()["id"]
            # Stored by this process: told here at its commit.
            created = await wait_change(feed, lambda c: c.message_id == message_id)
            assert (created.kind, created.inbound, created.conversation_status) == (
                LiveKind.message,
                False,
                "resolved",
            )
            # Sent by the worker, whose status webhooks (received here, stored, applied by the worker)
            # move the message: the worker's NOTIFY brings the changes here.
            while True:
                status = await wait_change(feed, lambda c: c.message_id == message_id)
                assert (status.kind, status.channel_id, status.conversation_id) == (
                    LiveKind.status,
                    worker["main"],
                    created.conversation_id,
                )
                got = await http.get(f"/whatsapp/messages/{message_id}", headers=headers)
                if got.json()["status"] == "delivered":
                    break
            # The customer's reply, applied by the worker too.
            (
                await sim.post(
                    "/_sim/inbound",
                    json={"phone_number_id": MAIN["phone_number_id"], "from": number, "text": "ok"},
                )
            ).raise_for_status()
            reply = await wait_change(feed, lambda c: c.inbound)
            assert (reply.kind, reply.conversation_id, reply.conversation_status) == (
                LiveKind.message,
                created.conversation_id,
                "open",
            )

    with simulator_wiring(simulator):
        asyncio.run(scenario())
