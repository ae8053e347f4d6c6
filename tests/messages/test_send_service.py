"""The send pipeline's service called as the API and the dashboard call it, without an HTTP server or a
running dispatcher: what `accept_send` stores, what it refuses before storing anything, and how an
Idempotency-Key's repeat is told apart. The HTTP answers for the same rules are in test_send_route.py
and the other tests of this folder."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from support.app_in_thread import services_only, sql
from support.harness import ADMIN_TOKEN, OUTSIDER_TOKEN, Simulator, new_number
from wagate.accounts.callers import principal_for_token
from wagate.core.errors import ChannelNotFound, Forbidden, WindowClosed
from wagate.idempotency.service import AlreadyAnswered, IdempotentRequest, request_hash
from wagate.messages.schemas import SendMessageRequest
from wagate.messages.service import accept_send
from wagate.runtime.gateway import Gateway

Scenario = Callable[[Gateway, dict[str, int]], Awaitable[None]]


def run(database_url: str, simulator: Simulator, scenario: Scenario) -> None:
    async def main() -> None:
        async with services_only(database_url, simulator) as (gateway, ids):
            await scenario(gateway, ids)

    asyncio.run(main())


def otp(channel_id: int, number: str) -> SendMessageRequest:
    return SendMessageRequest.model_validate(
        {
            "channel_id": channel_id,
            "phone_number": number,
            "template": {"name": "otp_code", "language": "en", "parameters": ["4711"]},
        }
    )


def stored(database_url: str, number: str) -> list[tuple[object, ...]]:
    """The messages to a number with their outbox rows (one row each if the send was stored whole)."""
    return sql(
        database_url,
        "SELECT m.id, m.status, o.state FROM messages m JOIN outbox o ON o.message_id = m.id"
        " WHERE m.phone_number = :number",
        number=number,
    )


def test_an_accepted_send_is_stored_with_its_outbox_row(database_url: str, simulator: Simulator) -> None:
    number = new_number()

    async def scenario(gateway: Gateway, ids: dict[str, int]) -> None:
        admin = await principal_for_token(gateway.caches, ADMIN_TOKEN)
        accepted = await accept_send(gateway, principal=admin, request=otp(ids["main"], number), idem=None)
        assert accepted.sent_as == "template"
        # `sent` is API.md's first status. No dispatcher runs here: the send waits ready in the outbox
        # for the process that owns the channel.
        assert stored(database_url, number) == [(accepted.message_id, "sent", "ready")]

    run(database_url, simulator, scenario)


def test_a_repeated_idempotency_key_stores_nothing_and_returns_the_first_answer(
    database_url: str, simulator: Simulator
) -> None:
    number = new_number()

    async def scenario(gateway: Gateway, ids: dict[str, int]) -> None:
        admin = await principal_for_token(gateway.caches, ADMIN_TOKEN)
        assert admin.api_key_id is not None
        request = otp(ids["main"], number)
        idem = IdempotentRequest(
            admin.api_key_id, f"key-{number}", request_hash("/send", request.model_dump(mode="json"))
        )
        first = await accept_send(gateway, principal=admin, request=request, idem=idem)
        with pytest.raises(AlreadyAnswered) as repeat:
            await accept_send(gateway, principal=admin, request=request, idem=idem)
        assert repeat.value.replay(idem).body["id"] == first.message_id
        assert [row[0] for row in stored(database_url, number)] == [first.message_id]

    run(database_url, simulator, scenario)


@pytest.mark.parametrize(
    ("case", "refusal"),
    [
        ("unknown channel", ChannelNotFound),
        ("not a member", Forbidden),
        ("text, window closed", WindowClosed),
    ],
)
def test_a_refused_send_stores_nothing(
    database_url: str, simulator: Simulator, case: str, refusal: type[Exception]
) -> None:
    number = new_number()

    async def scenario(gateway: Gateway, ids: dict[str, int]) -> None:
        caller = await principal_for_token(
            gateway.caches, OUTSIDER_TOKEN if case == "not a member" else ADMIN_TOKEN
        )
        body = {"channel_id": ids["main"], "phone_number": number, "text": "Your order has shipped."}
        if case == "unknown channel":
            body["channel_id"] = 999_999
        if case != "text, window closed":
            body = {
                **body,
                "text": None,
                "template": {"name": "otp_code", "language": "en", "parameters": ["1"]},
            }
        with pytest.raises(refusal):
            await accept_send(
                gateway, principal=caller, request=SendMessageRequest.model_validate(body), idem=None
            )
        assert stored(database_url, number) == []

    run(database_url, simulator, scenario)
