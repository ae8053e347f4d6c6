"""Issuing and revoking API keys through the one service the dashboard and provisioning use, checked
over HTTP: a new key works at once, a revoked one is refused at once by the same process."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from support.app_in_thread import gateway_in_this_loop, sql
from support.harness import ADMIN_TOKEN, Simulator
from wagate.accounts.service import create_api_key, revoke_key
from wagate.audit.models import SYSTEM
from wagate.core.errors import ApiKeyNameTaken, ApiKeyNotFound, UserNotFound


def user_id(database_url: str, email: str) -> int:
    return int(sql(database_url, "SELECT id FROM users WHERE email = :email", email=email)[0][0])


def test_a_key_issued_works_at_once_and_is_kept_hashed(database_url: str, simulator: Simulator) -> None:
    async def scenario() -> None:
        async with gateway_in_this_loop(database_url, simulator) as (url, gateway, ids):
            agent = user_id(database_url, "agent@acme.test")
            async with httpx.AsyncClient(base_url=f"{url}/v1/accounts/{ids['acme']}") as http:
                issued = await create_api_key(
                    gateway, account_id=ids["acme"], user_id=agent, name="zapier", by=SYSTEM
                )
                answer = await http.get(
                    "/whatsapp/channels", headers={"Authorization": f"Bearer {issued.token}"}
                )
                assert answer.status_code == 200, answer.text
                # An agent's key sees only the agent's inboxes.
                assert [c["channel_id"] for c in answer.json()["data"]] == [ids["main"]]

                with pytest.raises(ApiKeyNameTaken):
                    await create_api_key(
                        gateway, account_id=ids["acme"], user_id=agent, name="zapier", by=SYSTEM
                    )
                boss = user_id(database_url, "boss@globex.test")
                with pytest.raises(UserNotFound):  # a user of another account
                    await create_api_key(
                        gateway, account_id=ids["acme"], user_id=boss, name="sneaky", by=SYSTEM
                    )

        stored = sql(database_url, "SELECT token_hash, token_prefix FROM api_keys WHERE name = 'zapier'")
        assert len(stored) == 1
        token_hash, prefix = stored[0]
        assert issued.token not in token_hash and len(token_hash) == 64
        assert issued.token.startswith(prefix)

    asyncio.run(scenario())


def test_a_revoked_key_is_refused_at_once_by_the_process_that_revoked_it(
    database_url: str, simulator: Simulator
) -> None:
    async def scenario() -> None:
        async with gateway_in_this_loop(database_url, simulator) as (url, gateway, ids):
            admin = user_id(database_url, "admin@acme.test")
            agent = user_id(database_url, "agent@acme.test")
            async with httpx.AsyncClient(base_url=f"{url}/v1/accounts/{ids['acme']}") as http:
                issued = await create_api_key(
                    gateway, account_id=ids["acme"], user_id=admin, name="ci", by=SYSTEM
                )
                headers = {"Authorization": f"Bearer {issued.token}"}
                # Used first, so its principal sits in the 5-second cache when it is revoked.
                assert (await http.get("/whatsapp/channels", headers=headers)).status_code == 200

                # An agent revoking someone else's key finds no such key of theirs.
                with pytest.raises(ApiKeyNotFound):
                    await revoke_key(
                        gateway, account_id=ids["acme"], key_id=issued.key.id, user_id=agent, by=SYSTEM
                    )
                assert (await http.get("/whatsapp/channels", headers=headers)).status_code == 200
                # Another account's administrator cannot reach it either.
                with pytest.raises(ApiKeyNotFound):
                    await revoke_key(gateway, account_id=ids["globex"], key_id=issued.key.id, by=SYSTEM)

                revoked = await revoke_key(gateway, account_id=ids["acme"], key_id=issued.key.id, by=SYSTEM)
                assert revoked.revoked_at is not None
                refused = await http.get("/whatsapp/channels", headers=headers)
                assert refused.status_code == 401
                assert refused.json()["error"]["code"] == "unauthorized"
                # Revoking again keeps the first time; the other keys still work.
                again = await revoke_key(gateway, account_id=ids["acme"], key_id=issued.key.id, by=SYSTEM)
                assert again.revoked_at == revoked.revoked_at
                ok = await http.get("/whatsapp/channels", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
                assert ok.status_code == 200

    asyncio.run(scenario())
