"""The simulator follows Meta of November 2026: session messages and in-window utility templates are
charged from 2026-10-01 (Meta's announcement of 2026-07-01), and template pacing holds template sends
(`held_for_quality_assessment`) whose statuses come once Meta releases them."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from sim_harness import PHONE_NUMBER_ID, Harness

from wagate.simulator.state import SESSIONS_CHARGED_FROM
from wagate.whatsapp.outbound import authentication_components, template_message, text_message

TO = "994501234567"
ORDER = [{"type": "body", "parameters": [{"type": "text", "text": v} for v in ("A-1", "shipped")]}]


def answer(harness: Harness, body: dict[str, object]) -> dict[str, str]:
    response = harness.send(body)
    assert response.status_code == 200, response.text
    message: dict[str, str] = response.json()["messages"][0]
    return message


def customer_writes(harness: Harness, number: str) -> None:
    harness.control(
        "POST", "/_sim/inbound", json={"phone_number_id": PHONE_NUMBER_ID, "from": number, "text": "hi"}
    )


def first_pricing(harness: Harness, wamid: str) -> dict[str, object]:
    harness.receiver.wait_for(lambda r: len(r.statuses(wamid)) == 2)
    pricing: dict[str, object] = harness.receiver.statuses(wamid)[0]["pricing"]
    return pricing


@pytest.mark.parametrize(
    ("day", "charged"),
    [("2026-09-30", False), ("2026-10-01", True), ("2027-03-01", True)],
)
def test_session_messages_and_utility_templates_in_the_window_are_charged_from_october_2026(
    harness: Harness, day: str, charged: bool
) -> None:
    harness.control("POST", "/_sim/config", json={"pricing_date": day})
    customer_writes(harness, "+" + TO)
    session = answer(harness, text_message(TO, "your order shipped"))["id"]
    utility = answer(harness, template_message(TO, "order_update", "en", ORDER))["id"]
    free = {"billable": False, "pricing_model": "PMP", "type": "free_customer_service"}
    paid = {"billable": True, "pricing_model": "PMP", "type": "regular"}
    assert first_pricing(harness, session) == {**(paid if charged else free), "category": "service"}
    assert first_pricing(harness, utility) == {**(paid if charged else free), "category": "utility"}


def test_without_a_pinned_date_the_pricing_follows_todays_rules(harness: Harness) -> None:
    assert harness.control("GET", "/_sim/config")["pricing_date"] is None
    customer_writes(harness, "+" + TO)
    session = answer(harness, text_message(TO, "hello"))["id"]
    today = datetime.now(UTC).date()
    assert first_pricing(harness, session)["billable"] is (today >= SESSIONS_CHARGED_FROM)
    assert date(2026, 10, 1) == SESSIONS_CHARGED_FROM


def test_a_bad_pricing_date_or_hold_share_is_refused(harness: Harness) -> None:
    for patch in ({"pricing_date": "2026-13-01"}, {"hold_template_sends": 2}, {"held_release_seconds": -1}):
        response = harness.http.post(harness.sim.base_url + "/_sim/config", json=patch)
        assert response.status_code == 422, patch


def test_held_template_sends_get_their_statuses_once_released(harness: Harness) -> None:
    config = harness.control(
        "POST", "/_sim/config", json={"hold_template_sends": True, "held_release_seconds": None}
    )
    assert config["hold_template_sends"] is True
    held = answer(harness, template_message(TO, "order_update", "en", ORDER))
    assert held["message_status"] == "held_for_quality_assessment"
    # Pacing is for marketing and utility templates: an OTP and free text go as usual.
    otp = answer(harness, template_message(TO, "otp_code", "en", authentication_components("1234")))
    assert otp["message_status"] == "accepted"
    text = answer(harness, text_message(TO, "hi"))
    assert text["message_status"] == "accepted"
    harness.receiver.wait_for(lambda r: len(r.statuses(text["id"])) == 2 and len(r.statuses(otp["id"])) == 2)
    assert harness.receiver.statuses(held["id"]) == []  # still held
    assert harness.control("POST", "/_sim/held/release", json={"to": "+" + TO}) == {"released": 1}
    harness.receiver.wait_for(lambda r: len(r.statuses(held["id"])) == 2)
    assert [s["status"] for s in harness.receiver.statuses(held["id"])] == ["sent", "delivered"]
    # Sent once: the log has the one request.
    assert len(harness.control("GET", "/_sim/messages", params={"wamid": held["id"]})) == 1


def test_held_sends_are_released_after_the_set_time(harness: Harness) -> None:
    harness.control("POST", "/_sim/config", json={"hold_template_sends": True, "held_release_seconds": 0})
    held = answer(harness, template_message(TO, "order_update", "en", ORDER))
    assert held["message_status"] == "held_for_quality_assessment"
    harness.receiver.wait_for(lambda r: len(r.statuses(held["id"])) == 2)


def test_a_share_of_template_sends_is_held(harness: Harness) -> None:
    harness.control("POST", "/_sim/config", json={"hold_template_sends": 0.5, "held_release_seconds": None})
    answers = [
        answer(harness, template_message(TO, "order_update", "en", ORDER))["message_status"] for _ in range(4)
    ]
    assert answers.count("held_for_quality_assessment") == 2
    assert answers.count("accepted") == 2
    assert harness.control("POST", "/_sim/held/release", json={}) == {"released": 2}
    harness.control("POST", "/_sim/reset")
    assert harness.control("GET", "/_sim/config")["hold_template_sends"] is False
