"""`wagate serve --sandbox`: the gateway on its embedded default with the Cloud API simulator beside it.

Everything a first-time user needs to send an OTP within a minute: SQLite, a simulator that behaves
like Meta (signed status webhooks included), a demo account with a channel and templates, a fresh key.
"""

from __future__ import annotations

import secrets
import sys

import aiohttp
import uvicorn

from wagate.api.app import create_app
from wagate.core.config import Settings
from wagate.core.migrate import migrate
from wagate.core.security import new_api_token
from wagate.http.serving import DrainingServer, uvicorn_options
from wagate.ops.operations import run_provision
from wagate.ops.provisioning import AccountSpec, ApiKeySpec, ChannelSpec, ProvisionFile, UserSpec
from wagate.simulator.app import create_simulator_app
from wagate.simulator.config import SimulatorConfig
from wagate.simulator.server import base_url_of, serve_in_background

DEMO_PHONE_NUMBER_ID = "100000000000001"
DEMO_WABA_ID = "200000000000001"
DEMO_RECIPIENT = "+994501234567"


DEMO_EMAIL = "admin@demo.test"


def demo_account(token: str, password: str) -> ProvisionFile:
    return ProvisionFile(
        accounts=[
            AccountSpec(
                name="Demo",
                users=[
                    UserSpec(
                        email=DEMO_EMAIL,
                        name="Demo Admin",
                        role="administrator",
                        password=password,
                    )
                ],
                api_keys=[ApiKeySpec(user="admin@demo.test", name="sandbox", token=token)],
                channels=[
                    ChannelSpec(
                        name="Sandbox",
                        phone_number="+15550001111",
                        phone_number_id=DEMO_PHONE_NUMBER_ID,
                        waba_id=DEMO_WABA_ID,
                        access_token="sandbox-access-token",  # noqa: S106 - the simulator's, not Meta's
                        members=["admin@demo.test"],
                        messages_per_second=80,
                    )
                ],
            )
        ]
    )


async def run_sandbox(settings: Settings, *, host: str, port: int) -> None:
    gateway_url = f"http://{host}:{port}"
    app_secret = settings.meta_app_secret or secrets.token_hex(16)
    sim_config = SimulatorConfig(
        webhook_url=f"{gateway_url}/webhooks/whatsapp", app_secret=app_secret, read_enabled=True
    )
    sim_server, sim_task = await serve_in_background(
        create_simulator_app(sim_config), host="127.0.0.1", port=0
    )
    sim_url = base_url_of(sim_server)
    settings = settings.model_copy(
        update={"graph_api_url": f"{sim_url}/v23.0", "meta_app_secret": app_secret}
    )
    migrate(settings.database_url)
    async with aiohttp.ClientSession() as http:
        await http.post(
            f"{sim_url}/_sim/channels",
            json={
                "phone_number_id": DEMO_PHONE_NUMBER_ID,
                "waba_id": DEMO_WABA_ID,
                "display_phone_number": "15550001111",
            },
        )
    token = new_api_token()
    # A new password every start, like the key: printed once, kept only as a hash.
    password = secrets.token_urlsafe(12)
    result = await run_provision(settings, demo_account(token, password))
    account = result["accounts"][0]
    channel = account["channels"][0]
    print(
        _banner(gateway_url, sim_url, account["account_id"], channel["channel_id"], token, password),
        file=sys.stderr,
        flush=True,
    )
    server = DrainingServer(
        uvicorn.Config(create_app(settings), host=host, port=port, **uvicorn_options(settings))
    )
    try:
        await server.serve()
    finally:
        sim_server.should_exit = True
        await sim_task


def _banner(
    gateway_url: str, sim_url: str, account_id: int, channel_id: int, token: str, password: str
) -> str:
    body = (
        f'{{"channel_id": {channel_id}, "phone_number": "{DEMO_RECIPIENT}", '
        '"template": {"name": "otp_code", "language": "en", "parameters": ["123456"]}}'
    )
    return f"""
wagate sandbox is ready: API {gateway_url}/v1 (docs {gateway_url}/docs), Cloud API simulator {sim_url}
  account_id {account_id}, channel_id {channel_id}
  API key (shown once): {token}
  Dashboard: {gateway_url}/ (sign in as {DEMO_EMAIL}, password {password}, shown once)

Send an OTP:
  curl -s {gateway_url}/v1/accounts/{account_id}/whatsapp/messages \\
    -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' \\
    -d '{body}'
Then read it (the simulator reports delivered and read within a second):
  curl -s {gateway_url}/v1/accounts/{account_id}/whatsapp/messages/<id> -H 'Authorization: Bearer {token}'
"""
