"""Sends by business-scoped user id: ``"recipient": "<BSUID>"`` in place of ``"to"``."""

from __future__ import annotations

import base64
from typing import Any

from sim_harness import PHONE_NUMBER_ID, Harness
from sim_helpers import TO, send, set_customer, status_values, user_id_of, wamid_of

from wagate.simulator import MAGIC_UNDELIVERABLE
from wagate.whatsapp.outbound import authentication_components, template_message

STRANGER = "AZ.13491208655302741918"


def logged(harness: Harness, **params: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = harness.control("GET", "/_sim/messages", params=params)["data"]
    return data


def test_send_to_the_user_id_of_a_known_number(harness: Harness) -> None:
    user_id = user_id_of(harness)
    response = send(harness, recipient=user_id)
    wamid = wamid_of(response)
    assert response.json()["contacts"] == [{"input": user_id, "user_id": user_id}]
    [entry] = logged(harness, user_id=user_id)
    assert (entry["wamid"], entry["to"], entry["recipient"]) == (wamid, TO, user_id)
    assert entry["user_id"] == user_id
    assert "to" not in entry["body"] and entry["body"]["recipient"] == user_id
    assert logged(harness, to="+" + TO) == [entry]
    harness.receiver.wait_for(lambda r: len(r.statuses(wamid)) == 2)
    for status, contact in status_values(harness, wamid):
        # Meta shows the number of a customer without a username.
        assert contact == {"wa_id": TO, "user_id": user_id}
        assert (status["recipient_id"], status["recipient_user_id"]) == (TO, user_id)


def test_send_to_a_user_id_whose_number_is_unknown_or_hidden(harness: Harness) -> None:
    unknown = wamid_of(send(harness, recipient=STRANGER))
    [entry] = logged(harness, user_id=STRANGER)
    assert (entry["to"], entry["recipient"]) == (None, STRANGER)
    assert logged(harness, to="+" + TO) == []  # a null "to" matches no number

    user_id = user_id_of(harness)
    set_customer(harness, phone_number=TO, username="aysel.k")
    hidden = wamid_of(send(harness, recipient=user_id))
    assert base64.b64encode(TO.encode()).decode() not in hidden  # the wamid does not give it away
    harness.receiver.wait_for(lambda r: len(r.statuses(unknown)) == 2 and len(r.statuses(hidden)) == 2)
    for status, contact in status_values(harness, unknown):
        assert contact == {"user_id": STRANGER}
        assert status["recipient_user_id"] == STRANGER and "recipient_id" not in status
    sent, delivered = status_values(harness, hidden)
    assert sent[1] == {"user_id": user_id}
    assert delivered[1] == {"profile": {"username": "aysel.k"}, "user_id": user_id}
    assert all("recipient_id" not in status for status, _ in (sent, delivered))


def test_to_wins_when_both_are_sent(harness: Harness) -> None:
    response = send(harness, to=TO, recipient=STRANGER)
    assert response.json()["contacts"] == [{"input": TO, "wa_id": TO}]
    [entry] = logged(harness)
    assert (entry["to"], entry["recipient"], entry["user_id"]) == (TO, None, user_id_of(harness))


def test_addressee_errors(harness: Harness) -> None:
    def error(**addressee: str) -> dict[str, Any]:
        response = send(harness, **addressee)
        assert response.status_code == 400, response.text
        found: dict[str, Any] = response.json()["error"]
        return found

    missing = error()
    assert (missing["code"], missing["message"]) == (100, "(#100) The parameter to is required.")
    assert error(recipient="994501234567")["code"] == 131009
    assert error(recipient="az.123")["code"] == 131009
    otp = template_message(TO, "otp_code", "en", authentication_components("1234"))
    del otp["to"]
    response = harness.send(otp | {"recipient": user_id_of(harness)})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == 131062  # authentication templates need a number
    assert logged(harness) == []


def test_faults_follow_the_number_behind_a_user_id(harness: Harness) -> None:
    magic_user_id = user_id_of(harness, MAGIC_UNDELIVERABLE)
    wamid = wamid_of(send(harness, recipient=magic_user_id))
    harness.receiver.wait_for(lambda r: len(r.statuses(wamid)) == 1)
    [(status, contact)] = status_values(harness, wamid)
    assert status["status"] == "failed" and status["recipient_user_id"] == magic_user_id
    assert contact == {"user_id": magic_user_id}  # named as it was sent to

    harness.control("POST", "/_sim/config", json={"fail_next": {"count": 1, "code": 500, "to": STRANGER}})
    assert send(harness, recipient=STRANGER).status_code == 500
    assert send(harness, recipient=STRANGER).status_code == 200
    harness.control("POST", "/_sim/config", json={"answer_wamid_next": {"to": STRANGER, "wamid": "wamid.X"}})
    assert wamid_of(send(harness, recipient=STRANGER)) == "wamid.X"
    assert all(e["phone_number_id"] == PHONE_NUMBER_ID for e in logged(harness))
