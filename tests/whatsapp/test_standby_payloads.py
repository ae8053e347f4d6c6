"""API.md section 14: Meta's `standby`, `messaging_handovers` and system message webhooks, parsed
from saved examples (tests/whatsapp/fixtures/, shapes from Meta's references and observed traffic)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wagate.whatsapp.standby import Holder
from wagate.whatsapp.webhook_body import parse_webhook

FIXTURES = Path(__file__).parent / "fixtures"
CUSTOMER = ("994501234567", "AZ.13491208655302741918")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def test_a_customer_message_on_standby_is_a_customer_message_marked_standby() -> None:
    [change] = parse_webhook(load("standby_message.json")).changes
    assert change.standby and change.phone_number_id == "106540352242922"
    [message] = change.messages
    assert message.standby and message.text == "Do you deliver on Sundays?"
    assert (message.from_, message.user_id, message.profile_name) == (*CUSTOMER, "Aysel Mammadova")
    assert change.echoes == () and change.handovers == () and change.system_messages == ()


def test_the_agents_reply_is_an_echo_and_its_status_a_status() -> None:
    parsed = parse_webhook(load("standby_echo.json"))
    assert parsed.odd == ()
    echoed, status = parsed.changes
    [echo] = echoed.echoes
    assert echo.text == "Yes, we deliver every day from 9 to 21." and echo.type == "text"
    assert (echo.customer.wa_id, echo.customer.user_id) == CUSTOMER  # the user id from the contact
    assert echoed.messages == ()  # an echo is no customer message
    [delivered] = status.statuses
    assert status.standby and delivered.id == echo.wamid and delivered.status == "delivered"


def test_items_nested_under_standby_as_real_traffic_has_them_are_read() -> None:
    [change] = parse_webhook(load("standby_nested.json")).changes
    [message], [echo], [status] = change.messages, change.echoes, change.statuses
    assert message.standby and message.text == "And on holidays?"
    assert message.user_id == CUSTOMER[1]
    assert echo.customer.wa_id == CUSTOMER[0] and status.id == echo.wamid
    assert change.raw["standby"]["messages"]  # kept as Meta sent it


@pytest.mark.parametrize(
    ("fixture", "kind", "holder", "customer"),
    [
        ("messaging_handovers_control_passed.json", "control_passed", Holder.APP, (CUSTOMER[0], None)),
        ("messaging_handovers_control_taken.json", "control_taken", Holder.AGENT, CUSTOMER),
    ],
)
def test_a_handover_names_who_holds_the_conversation(
    fixture: str, kind: str, holder: Holder, customer: tuple[str, str | None]
) -> None:
    parsed = parse_webhook(load(fixture))
    assert parsed.odd == ()
    [change] = parsed.changes
    assert change.phone_number_id == "106540352242922"  # from `recipient`: there is no metadata
    [handover] = change.handovers
    assert (handover.kind, handover.holder) == (kind, holder)
    assert (handover.customer.wa_id, handover.customer.user_id) == customer


@pytest.mark.parametrize(
    ("kind", "detail", "holder"),
    [
        ("control_passed", {}, Holder.APP),  # reaches the new owner: the app
        ("control_taken", {}, Holder.AGENT),  # reaches the previous owner: the app lost it
        ("control_passed", {"new_owner_role": "ai_agent"}, Holder.AGENT),  # roles decide
        ("control_taken", {"previous_owner_app_role": "meta_business_agent"}, Holder.APP),
    ],
)
def test_roles_decide_and_else_the_kind(kind: str, detail: dict[str, str], holder: Holder) -> None:
    body = load("messaging_handovers_control_passed.json")
    value = body["entry"][0]["changes"][0]["value"]
    value.pop("control_passed")
    value.update({"type": kind, kind: detail})
    [change] = parse_webhook(body).changes
    assert change.handovers[0].holder is holder


def test_a_handover_that_cannot_be_read_is_odd_and_the_rest_applies() -> None:
    body = load("messaging_handovers_control_passed.json")
    body["entry"][0]["changes"][0]["value"]["type"] = "control_shared"
    body["entry"][0]["changes"].append(load("standby_message.json")["entry"][0]["changes"][0])
    parsed = parse_webhook(body)
    [odd] = parsed.odd
    assert "control_shared" in odd.reason and odd.phone_number_id == "106540352242922"
    assert [len(c.messages) for c in parsed.changes] == [0, 1]


def test_a_user_id_change_is_a_notice_not_a_customer_message() -> None:
    [change] = parse_webhook(load("system_user_changed_user_id.json")).changes
    assert change.messages == ()
    [notice] = change.system_messages
    assert (notice.kind, notice.previous_user_id, notice.user_id) == (
        "user_changed_user_id",
        CUSTOMER[1],
        "AZ.80211943265501772346",
    )
    assert notice.moves_user_id and notice.from_ is None


def test_the_old_id_is_the_messages_own_when_system_does_not_name_it() -> None:
    body = load("system_user_changed_user_id.json")
    del body["entry"][0]["changes"][0]["value"]["messages"][0]["system"]["previous_user_id"]
    [notice] = parse_webhook(body).changes[0].system_messages
    assert notice.previous_user_id == CUSTOMER[1] and notice.moves_user_id


def test_a_number_change_names_the_new_number_and_ids() -> None:
    [notice] = parse_webhook(load("system_user_changed_number.json")).changes[0].system_messages
    assert (notice.kind, notice.from_, notice.new_wa_id) == (
        "user_changed_number",
        *("994501234567", "994551234567"),
    )
    assert notice.moves_user_id
