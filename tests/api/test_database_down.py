"""With its database unreachable the service answers 503 not_ready (retry later), never a 500."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from cryptography.fernet import Fernet

from support.harness import ADMIN_TOKEN
from wagate.api.app import create_app
from wagate.core.config import Settings
from wagate.simulator.server import start_in_thread


@pytest.fixture
def unreachable_gateway() -> Iterator[str]:
    settings = Settings(
        database_url="postgresql+psycopg://postgres@127.0.0.1:1/nowhere",  # nothing listens on port 1
        secret_key=Fernet.generate_key().decode(),
        graph_api_url="http://127.0.0.1:1/v23.0",
    )
    url, stop = start_in_thread(create_app(settings, run_dispatcher=False))
    yield url
    stop()


def test_requests_get_503_while_the_database_is_down(unreachable_gateway: str) -> None:
    with httpx.Client(base_url=unreachable_gateway, timeout=10) as http:
        ready = http.get("/readyz")
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "not_ready"
        body = {"channel_id": 1, "phone_number": "+994551234567", "text": "hi"}
        send = http.post(
            "/v1/accounts/1/whatsapp/messages", json=body, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
        assert send.status_code == 503
        assert send.json()["error"]["code"] == "not_ready"
        assert send.headers["retry-after"] == "1"
