"""Per-channel pacing, and templates synced periodically, on a gateway with a slow channel."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from support.app_in_thread import running_gateway
from support.harness import Gateway, Simulator, new_number, provision_file, wait_for

pytestmark = pytest.mark.alone  # measures pacing in 1 s windows

PACED = {
    "phone_number_id": "106540352249999",
    "waba_id": "102290129349999",
    "display_phone_number": "15550009999",
}
RATE = 5


@pytest.fixture(scope="module")
def paced(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    simulator.http.post(f"{simulator.url}/_sim/channels", json=PACED).raise_for_status()
    spec = provision_file()
    spec["accounts"][0]["channels"].append(
        {
            "name": "Paced",
            "phone_number": "+15550009999",
            "phone_number_id": PACED["phone_number_id"],
            "waba_id": PACED["waba_id"],
            "access_token": "EAAG-test-paced",
            "members": ["admin@acme.test"],
            "messages_per_second": RATE,
        }
    )
    with running_gateway(database_url, simulator, spec, template_sync_interval_seconds=1.0) as gateway:
        yield gateway


def max_in_any_second(times: list[float]) -> int:
    times = sorted(times)
    return max(sum(1 for t in times[i:] if t - start < 1.0) for i, start in enumerate(times))


def test_a_channel_never_gets_more_than_its_rate(paced: Gateway) -> None:
    numbers = [new_number() for _ in range(3 * RATE)]
    started = time.monotonic()
    ids = []
    for number in numbers:
        response = paced.send(
            {
                "channel_id": paced.ids["paced"],
                "phone_number": number,
                "template": {"name": "otp_code", "language": "en", "parameters": ["1"]},
            }
        )
        assert response.status_code == 201
        ids.append(response.json()["id"])

    def arrived() -> list[dict[str, Any]] | None:
        sent = paced.sim.http.get(
            f"{paced.sim.url}/_sim/messages", params={"phone_number_id": PACED["phone_number_id"]}
        ).json()["data"]
        ours = [m for m in sent if m["biz_opaque_callback_data"] in ids]
        return ours if len(ours) == len(ids) else None

    sent = wait_for(arrived, timeout=15, what="all paced sends")
    elapsed = time.monotonic() - started
    assert max_in_any_second([m["received_at"] for m in sent]) <= RATE
    # 15 messages at 5/s need at least two full seconds after the first five. (How close to the
    # allowance the pacing gets is measured by bench/, not asserted here.)
    assert elapsed >= 2.0


def test_templates_are_synced_periodically(paced: Gateway) -> None:
    waba = PACED["waba_id"]
    templates = paced.sim.http.get(f"{paced.sim.url}/_sim/templates/{waba}").json()["data"]
    added = {
        "name": "fresh_notice",
        "language": "en",
        "status": "APPROVED",
        "category": "UTILITY",
        "components": [{"type": "BODY", "text": "Hello {{1}}"}],
    }
    paced.sim.http.put(
        f"{paced.sim.url}/_sim/templates/{waba}", json={"data": [*templates, added]}
    ).raise_for_status()

    def listed() -> list[Any]:
        response = paced.http.get(
            paced.v1("/whatsapp/templates"),
            params={"channel_id": paced.ids["paced"], "name": "fresh_notice"},
            headers=paced.headers(),
        )
        return list(response.json()["data"])

    [template] = wait_for(listed, timeout=10, what="the periodic sync to bring the new template")
    assert template["variables"] == ["1"]
    # And a send with it goes through.
    body = {
        "channel_id": paced.ids["paced"],
        "phone_number": new_number(),
        "template": {"name": "fresh_notice", "language": "en", "parameters": ["Ann"]},
    }
    assert paced.send(body).status_code == 201
