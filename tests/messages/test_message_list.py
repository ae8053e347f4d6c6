"""The message list (API.md section 11, issue 13 point 3): `GET .../whatsapp/messages` over HTTP on both
databases: each filter alone and combined, keyset paging without gaps or repeats, only the inboxes the
key's user is a member of, 422 naming the field, and one statement for a page's conversations."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import event

from support.app_in_thread import gateway_with_app
from support.harness import (
    AGENT_TOKEN,
    MAIN,
    OTHER_TOKEN,
    OUTSIDER_TOKEN,
    Gateway,
    Simulator,
    new_number,
    wait_for,
)
from wagate.simulator.magic import MAGIC_UNDELIVERABLE

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}


@pytest.fixture(scope="module")
def running(database_url: str, simulator: Simulator) -> Iterator[tuple[Gateway, FastAPI]]:
    with gateway_with_app(database_url, simulator, wire_simulator=True) as both:
        yield both


@pytest.fixture(scope="module")
def gateway(running: tuple[Gateway, FastAPI]) -> Gateway:
    return running[0]


def post_login(client: httpx.Client, email: str, password: str) -> httpx.Response:
    """Sign in to the dashboard (as tests/dashboard/test_sign_in.py does, not importable from here)."""
    form = client.get("/login").text
    token = re.search(r'name="csrf_token" value="([^"]+)"', form)
    assert token is not None
    return client.post(
        "/login", data={"email": email, "password": password, "csrf_token": token.group(1), "next": "/"}
    )


def listing(gateway: Gateway, token: str | None = None, **params: Any) -> httpx.Response:
    headers = gateway.headers(token) if token else gateway.headers()
    return gateway.http.get(gateway.v1("/whatsapp/messages"), params=params, headers=headers)


def listed(gateway: Gateway, token: str | None = None, **params: Any) -> list[dict[str, Any]]:
    """Every message of the list for these filters, page after page."""
    items: list[dict[str, Any]] = []
    before = None
    while True:
        page = listing(gateway, token, limit=200, **params, **({"before": before} if before else {}))
        assert page.status_code == 200, page.text
        items += page.json()["data"]
        before = page.json()["next_before"]
        if before is None:
            return items


def send(gateway: Gateway, channel: str, number: str) -> str:
    response = gateway.send({"channel_id": gateway.ids[channel], "phone_number": number, "template": OTP})
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    return message_id


@pytest.fixture(scope="module")
def world(gateway: Gateway) -> dict[str, Any]:
    """Messages of every kind: API sends on both inboxes, a failure, a batch, an agent's reply, and a
    customer's message (which is not listed)."""
    a, b = new_number(), new_number()
    ids: dict[str, Any] = {
        "a": [send(gateway, "main", a), send(gateway, "main", a)],
        "b": [send(gateway, "second", b)],
        "failed": [send(gateway, "main", MAGIC_UNDELIVERABLE)],
    }
    bulk_numbers = [new_number(), new_number()]
    batch = gateway.http.post(
        gateway.v1("/whatsapp/bulk_messages"),
        json={"channel_id": gateway.ids["main"], "template": OTP, "phone_numbers": bulk_numbers},
        headers=gateway.headers(),
    )
    assert batch.status_code == 202, batch.text
    batch_id = batch.json()["batch_id"]
    recipients = wait_for(
        lambda: (
            (
                r := gateway.http.get(
                    gateway.v1(f"/whatsapp/bulk_messages/{batch_id}"), headers=gateway.headers()
                ).json()["recipients"]
            )
            and all(x["message_id"] for x in r)
            and r
        ),
        what="the batch's messages",
    )
    ids["batch"] = [r["message_id"] for r in recipients]
    # A customer writes (inbound: not in the list), and an agent answers in the dashboard (listed).
    customer = new_number()
    gateway.sim.inbound(MAIN["phone_number_id"], customer, "Hello?")
    conversation = wait_for(
        lambda: re.search(
            r'data-conversation-id="(\d+)"', agent_page(gateway, f"/conversations?q={customer[-7:]}")
        ),
        what="the customer's conversation",
    ).group(1)
    with httpx.Client(base_url=gateway.url) as client:
        assert post_login(client, "agent@acme.test", "pw-agent").status_code == 303
        page = client.get(f"/conversations/{conversation}").text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert csrf is not None
        reply = client.post(
            f"/conversations/{conversation}/reply", data={"text": "Hi!", "csrf_token": csrf.group(1)}
        )
        assert reply.status_code == 303, reply.text
    agent_reply = wait_for(
        lambda: [m for m in listed(gateway, phone_number=customer) if m["text"] == "Hi!"],
        what="the agent's reply in the list",
    )
    ids["agent"] = [agent_reply[0]["id"]]
    ids.update(numbers={"a": a, "b": b, "customer": customer}, batch_id=batch_id)
    # Statuses settle: the failure fails (131026), the rest are delivered.
    gateway.wait_status(ids["failed"][0], "failed")
    for key in ("a", "b", "batch", "agent"):
        for message_id in ids[key]:
            gateway.wait_status(message_id, "delivered")
    return ids


def agent_page(gateway: Gateway, path: str) -> str:
    with httpx.Client(base_url=gateway.url) as client:
        assert post_login(client, "agent@acme.test", "pw-agent").status_code == 303
        return client.get(path).text


def ours(world: dict[str, Any]) -> set[str]:
    return {m for key in ("a", "b", "failed", "batch", "agent") for m in world[key]}


def test_the_list_holds_api_bulk_and_agent_messages_newest_first(
    gateway: Gateway, world: dict[str, Any]
) -> None:
    items = listed(gateway)
    ids = [m["id"] for m in items]
    assert ours(world) <= set(ids)
    assert len(ids) == len(set(ids))
    # Never a customer's message: only outbound ones, each the object of operation 5.
    assert not [
        m for m in items if m["phone_number"] == world["numbers"]["customer"] and m["text"] == "Hello?"
    ]
    for item in items:
        if item["id"] in ours(world):
            assert item == gateway.message(item["id"])
    keys = [(m["created_at"], m["id"]) for m in items]
    assert keys == sorted(keys, reverse=True)
    failed = next(m for m in items if m["id"] == world["failed"][0])
    assert failed["status"] == "failed" and failed["external_error"].startswith("131026:")
    assert failed["conversation"]["status"] == "resolved"


def test_each_filter_alone(gateway: Gateway, world: dict[str, Any]) -> None:
    mine = ours(world)

    def found(**params: Any) -> set[str]:
        return {m["id"] for m in listed(gateway, **params)} & mine

    everything = {m["id"]: m for m in listed(gateway) if m["id"] in mine}
    assert found(channel_id=gateway.ids["second"]) == set(world["b"])
    assert found(channel_id=gateway.ids["main"]) == mine - set(world["b"])
    # A number in any accepted form.
    assert found(phone_number=world["numbers"]["a"]) == set(world["a"])
    assert found(phone_number=world["numbers"]["a"].removeprefix("+")) == set(world["a"])
    assert found(status="failed") == set(world["failed"])
    assert found(status="delivered") == mine - set(world["failed"])
    assert found(status="read") == set()
    assert found(batch_id=world["batch_id"]) == set(world["batch"])
    # created_after is inclusive, created_before exclusive: a message's own time splits the list.
    middle = everything[world["batch"][0]]["created_at"]
    after = found(created_after=middle)
    before = found(created_before=middle)
    assert after == {i for i, m in everything.items() if m["created_at"] >= middle}
    assert before == {i for i, m in everything.items() if m["created_at"] < middle}
    assert after | before == mine and not after & before
    # A time without a zone is UTC.
    assert found(created_after=middle.removesuffix("Z")) == after


def test_filters_combined(gateway: Gateway, world: dict[str, Any]) -> None:
    mine = ours(world)

    def found(**params: Any) -> set[str]:
        items = listed(gateway, **params)
        return {m["id"] for m in items} & mine

    main = gateway.ids["main"]
    assert found(channel_id=main, phone_number=world["numbers"]["a"], status="delivered") == set(world["a"])
    assert found(channel_id=gateway.ids["second"], phone_number=world["numbers"]["a"]) == set()
    assert found(channel_id=main, status="failed", phone_number=MAGIC_UNDELIVERABLE) == set(world["failed"])
    assert found(batch_id=world["batch_id"], status="failed") == set()
    first = gateway.message(world["a"][0])["created_at"]
    last = gateway.message(world["agent"][0])["created_at"]
    window = found(created_after=first, created_before=last, channel_id=main)
    assert world["a"][0] in window and world["agent"][0] not in window
    assert set(world["b"]).isdisjoint(window)


def test_a_page_reads_its_conversations_in_one_statement(
    running: tuple[Gateway, FastAPI], world: dict[str, Any]
) -> None:
    gateway, app = running
    seen: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "conversations" in statement:
            seen.append(statement)

    engine = app.state.gateway.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", before)
    try:
        page = listing(gateway, limit=200)
    finally:
        event.remove(engine, "before_cursor_execute", before)
    assert page.status_code == 200 and len(page.json()["data"]) >= len(ours(world))
    assert len(seen) == 1, seen


def test_pages_of_120_messages_have_no_gaps_or_repeats(gateway: Gateway) -> None:
    # A batch of 100 shares one created_at: the id orders them. Then 20 single sends.
    numbers = [new_number() for _ in range(100)]
    batch = gateway.http.post(
        gateway.v1("/whatsapp/bulk_messages"),
        json={"channel_id": gateway.ids["main"], "template": OTP, "phone_numbers": numbers},
        headers=gateway.headers(),
    )
    assert batch.status_code == 202, batch.text
    sent = {send(gateway, "main", new_number()) for _ in range(20)}
    batch_id = batch.json()["batch_id"]
    in_batch = wait_for(
        lambda: len(b := listed(gateway, batch_id=batch_id)) == 100 and b, what="the batch's messages"
    )
    batch_ids = {m["id"] for m in in_batch}
    sent |= batch_ids
    start = min(gateway.message(m)["created_at"] for m in sent)
    seen: list[dict[str, Any]] = []
    before = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 7, "created_after": start}
        if before:
            params["before"] = before
        page = listing(gateway, **params)
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["data"]) <= 7
        seen += body["data"]
        pages += 1
        if pages == 3:
            # A message sent while paging is newer than every cursor: it never shows up in later pages.
            sent_meanwhile = send(gateway, "main", new_number())
        before = body["next_before"]
        if before is None:
            break
        assert before == body["data"][-1]["id"]
    ids = [m["id"] for m in seen]
    assert len(ids) == len(set(ids)), "a message was listed twice"
    assert sent <= set(ids), "a message was skipped"
    assert sent_meanwhile not in ids
    assert pages == -(-len(ids) // 7)
    keys = [(m["created_at"], m["id"]) for m in seen]
    assert keys == sorted(keys, reverse=True)
    # The same list in pages of 200 and in pages of 7.
    assert [m["id"] for m in listed(gateway, created_after=start) if m["id"] != sent_meanwhile] == ids


def test_only_inboxes_the_key_user_is_a_member_of(gateway: Gateway, world: dict[str, Any]) -> None:
    second, main = gateway.ids["second"], gateway.ids["main"]
    outsider = listed(gateway, OUTSIDER_TOKEN)  # outsider@acme.test: the Second inbox only
    assert outsider and {m["channel_id"] for m in outsider} == {second}
    assert set(world["b"]) <= {m["id"] for m in outsider}
    agent = listed(gateway, AGENT_TOKEN)  # agent@acme.test: Main only
    assert {m["channel_id"] for m in agent} == {main}
    assert set(world["b"]).isdisjoint(m["id"] for m in agent)
    # Another inbox by name: 403; a channel of no inbox of the account: 404; another account: 403.
    refused = listing(gateway, OUTSIDER_TOKEN, channel_id=main)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert listing(gateway, channel_id=gateway.ids["globex_channel"]).json()["error"]["code"] == (
        "channel_not_found"
    )
    other = gateway.http.get(
        gateway.v1("/whatsapp/messages", gateway.ids["globex"]), headers=gateway.headers()
    )
    assert other.status_code == 403
    globex = gateway.http.get(
        gateway.v1("/whatsapp/messages", gateway.ids["globex"]), headers=gateway.headers(OTHER_TOKEN)
    )
    assert globex.status_code == 200 and globex.json() == {"data": [], "next_before": None}
    assert gateway.http.get(gateway.v1("/whatsapp/messages")).status_code == 401


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 201}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"status": "queued"}, "status"),
        ({"channel_id": 0}, "channel_id"),
        ({"channel_id": "main"}, "channel_id"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"created_before": "2026-13-01T00:00:00Z"}, "created_before"),
        (
            {"created_after": "2026-11-25T00:00:00Z", "created_before": "2026-11-24T00:00:00Z"},
            "created_before",
        ),
        ({"before": "msg_00000000000000000000000000"}, "before"),
        ({"before": "x" * 41}, "before"),
        ({"batch_id": "b" * 41}, "batch_id"),
    ],
)
def test_bad_values_are_422_naming_the_field(gateway: Gateway, params: dict[str, Any], field: str) -> None:
    response = listing(gateway, **params)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert [d["field"] for d in error["details"]] == [field]


def test_a_bad_number_is_invalid_phone_number(gateway: Gateway) -> None:
    response = listing(gateway, phone_number="12345")
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_phone_number" and error["details"][0]["field"] == "phone_number"


def test_openapi_describes_the_operation(gateway: Gateway) -> None:
    operation = gateway.http.get(f"{gateway.url}/openapi.json").json()["paths"][
        "/v1/accounts/{account_id}/whatsapp/messages"
    ]["get"]
    assert operation["operationId"] == "list_messages"
    assert operation["description"]
    assert {"200", "401", "403", "404", "422"} <= set(operation["responses"])
    names = {p["name"] for p in operation["parameters"]}
    assert {"channel_id", "phone_number", "status", "batch_id", "created_after", "created_before"} <= names
    assert {"limit", "before"} <= names
