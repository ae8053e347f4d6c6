"""API.md: a repeat of a request with the same Idempotency-Key sends nothing, whichever process it reaches.

Two `wagate serve` processes share one PostgreSQL database, and a client's retries of the same request
land on both at once (a retry storm behind a load balancer). Each process holds a key it is answering
(a repeat meanwhile is 409), but only the database sees both: the key's row decides which request
stored its message, and the other must answer with that one's response, never send a second message.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

import support.gateway_process as machinery
from support.app_in_thread import sql
from support.gateway_process import GatewayProcess, Provisioned, free_port, sim_sends
from support.harness import ADMIN_TOKEN, MAIN, Simulator, new_number, wait_for

pytestmark = pytest.mark.timeout(180)

provisioned = machinery.provisioned
wired_simulator = machinery.wired_simulator

KEYS = 24  # requests, each retried at once on both processes
RETRIES = 6  # copies of each request in flight together, spread over the two processes


@pytest.fixture(scope="module")
def postgres(database_url: str) -> None:
    """Before `provisioned`, so that SQLite is skipped without provisioning it."""
    if database_url.startswith("sqlite"):
        pytest.skip("SQLite runs one gateway process; tests/idempotency/test_key_race.py covers the race")


@pytest.fixture
def two_gateways(postgres: None, provisioned: Provisioned, tmp_path: Path) -> Iterator[list[GatewayProcess]]:
    gateways = [GatewayProcess(provisioned.env, free_port(), tmp_path / str(n)) for n in (1, 2)]
    try:
        for gateway in gateways:
            gateway.log_dir.mkdir()
            gateway.start()
        yield gateways
    finally:
        for gateway in gateways:
            gateway.stop()


def test_a_retry_storm_over_two_processes_sends_once(
    two_gateways: list[GatewayProcess],
    provisioned: Provisioned,
    simulator: Simulator,
    wired_simulator: Any,
) -> None:
    wired_simulator(two_gateways[0].url)
    requests = [(f"storm-{n}-{new_number()}", new_number()) for n in range(KEYS)]
    answers: dict[str, list[tuple[int, dict[str, Any]]]] = {key: [] for key, _ in requests}
    lock = threading.Lock()
    start = threading.Barrier(RETRIES)

    def storm(key: str, number: str) -> None:
        body = {
            "channel_id": provisioned.channel_id,
            "phone_number": number,
            "template": {"name": "otp_code", "language": "en", "parameters": ["424242"]},
        }
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Idempotency-Key": key}

        def one(copy: int) -> None:
            gateway = two_gateways[copy % 2]
            path = f"/v1/accounts/{provisioned.account_id}/whatsapp/messages"
            with httpx.Client(timeout=15) as http:
                start.wait()
                response = http.post(gateway.url + path, json=body, headers=headers)
            with lock:
                answers[key].append((response.status_code, response.json()))

        with ThreadPoolExecutor(RETRIES) as pool:
            for future in [pool.submit(one, copy) for copy in range(RETRIES)]:
                future.result()

    for key, number in requests:
        storm(key, number)
    # Later retries (the first answers are stored by now) all replay the first response.
    for key, number in requests[:4]:
        storm(key, number)

    ids: dict[str, str] = {}
    for key, number in requests:
        codes = Counter(code for code, _ in answers[key])
        assert set(codes) <= {201, 409}, f"{key}: {answers[key]}"
        assert all(b["error"]["code"] == "idempotency_key_in_use" for c, b in answers[key] if c == 409)
        accepted = {b["id"] for c, b in answers[key] if c == 201}
        assert len(accepted) == 1, f"{key} ({number}) was accepted as {sorted(accepted)} ({dict(codes)})"
        ids[number] = accepted.pop()

    numbers = [number for _, number in requests]
    stored = [
        row
        for number in numbers
        for row in sql(
            provisioned.database_url,
            "SELECT phone_number, id FROM messages WHERE phone_number = :n",
            n=number,
        )
    ]
    assert sorted(stored) == sorted(ids.items()), "one stored message per request, the one answered"

    def upstream() -> list[dict[str, Any]] | None:
        digits = {n.lstrip("+") for n in numbers}
        sent = [
            m for m in sim_sends(simulator, MAIN["phone_number_id"]) if (m["to"] or "").lstrip("+") in digits
        ]
        return sent if len(sent) >= len(numbers) else None

    sent = wait_for(upstream, timeout=30, what="every request's message at the simulator")
    per_number = Counter("+" + m["to"].lstrip("+") for m in sent)
    assert all(count == 1 for count in per_number.values()), per_number
    assert {m["biz_opaque_callback_data"] for m in sent} == set(ids.values())
