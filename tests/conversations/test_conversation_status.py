"""Changing a conversation's status through the service the dashboard's Resolve / Reopen buttons call,
checked over HTTP in the message object's `conversation`."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from support.app_in_thread import gateway_in_this_loop
from support.harness import ADMIN_TOKEN, AGENT_TOKEN, OTHER_TOKEN, OUTSIDER_TOKEN, Simulator
from wagate.accounts.callers import principal_for_token
from wagate.conversations.models import ConversationStatus
from wagate.conversations.service import change_conversation_status
from wagate.core.errors import ConversationNotFound, Forbidden

NUMBER = "+994501112233"


def test_resolve_and_reopen_change_the_conversation_the_api_shows(
    database_url: str, simulator: Simulator
) -> None:
    async def scenario() -> None:
        async with (
            gateway_in_this_loop(database_url, simulator) as (url, gateway, ids),
            httpx.AsyncClient(base_url=f"{url}/v1/accounts/{ids['acme']}") as http,
        ):

            async def conversation_of(message_id: str) -> dict[str, Any]:
                got = await http.get(
                    f"/whatsapp/messages/{message_id}", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
                )
                assert got.status_code == 200, got.text
                conversation: dict[str, Any] = got.json()["conversation"]
                return conversation

            sent = await http.post(
                "/whatsapp/messages",
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                json={
                    "channel_id": ids["main"],
                    "phone_number": NUMBER,
                    "template": {"name": "otp_code", "language": "en", "parameters": ["4711"]},
                },
            )
            assert sent.status_code == 201, sent.text
            message_id = sent.json()["id"]
            conversation = await conversation_of(message_id)
            assert conversation["status"] == "resolved"  # the spec: an API send resolves it

            agent = await principal_for_token(gateway.caches, AGENT_TOKEN)
            changed = await change_conversation_status(
                gateway,
                principal=agent,
                conversation_id=conversation["id"],
                status=ConversationStatus.open,
            )
            assert changed.status is ConversationStatus.open
            assert (await conversation_of(message_id))["status"] == "open"
            await change_conversation_status(
                gateway,
                principal=agent,
                conversation_id=conversation["id"],
                status=ConversationStatus.resolved,
            )
            assert (await conversation_of(message_id))["status"] == "resolved"

            # Not a member of the Main inbox: refused, nothing changed.
            outsider = await principal_for_token(gateway.caches, OUTSIDER_TOKEN)
            with pytest.raises(Forbidden):
                await change_conversation_status(
                    gateway,
                    principal=outsider,
                    conversation_id=conversation["id"],
                    status=ConversationStatus.pending,
                )
            # Another account's administrator: not found, so ids cannot be probed.
            boss = await principal_for_token(gateway.caches, OTHER_TOKEN)
            with pytest.raises(ConversationNotFound):
                await change_conversation_status(
                    gateway,
                    principal=boss,
                    conversation_id=conversation["id"],
                    status=ConversationStatus.open,
                )
            # Unknown id: not found.
            with pytest.raises(ConversationNotFound):
                await change_conversation_status(
                    gateway, principal=agent, conversation_id=10**9, status=ConversationStatus.open
                )
            assert (await conversation_of(message_id))["status"] == "resolved"

    asyncio.run(scenario())
