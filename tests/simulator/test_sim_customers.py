"""Customers of 2026: business-scoped user ids, usernames, and what the webhooks say about them."""

from __future__ import annotations

import base64
from typing import Any

from sim_harness import PHONE_NUMBER_ID, Harness
from sim_helpers import TO, USER_ID, customer, send, set_customer, status_values, user_id_of, values, wamid_of

from wagate.simulator import MAGIC_FAILED_THEN_DELIVERED, MAGIC_UNDELIVERABLE


def test_every_number_has_a_stable_user_id_per_waba(harness: Harness) -> None:
    first = customer(harness, phone_number="+" + TO)
    assert first == {"phone_number": "+" + TO, "wa_id": TO, "user_id": first["user_id"], "username": None}
    assert USER_ID.fullmatch(first["user_id"]) and first["user_id"].startswith("AZ.")
    assert customer(harness, phone_number=TO)["user_id"] == first["user_id"]
    assert customer(harness, user_id=first["user_id"])["wa_id"] == TO
    harness.control("POST", "/_sim/reset")
    assert user_id_of(harness) == first["user_id"]  # derived, not remembered
    # Another WABA (an unregistered number gets one of its own) sees another id.
    assert user_id_of(harness, phone_number_id="4242") != first["user_id"]
    assert user_id_of(harness, "+15550001234").startswith("US.")
    assert user_id_of(harness, "+447700900123").startswith("GB.")


def test_customer_control_sets_and_clears_a_username(harness: Harness) -> None:
    user_id = user_id_of(harness)
    given = set_customer(harness, phone_number="+" + TO, username="aysel.k")
    assert given == {"phone_number": "+" + TO, "wa_id": TO, "user_id": user_id, "username": "aysel.k"}
    assert customer(harness, user_id=user_id)["username"] == "aysel.k"
    assert set_customer(harness, user_id=user_id)["username"] == "aysel.k"  # absent: unchanged
    assert set_customer(harness, user_id=user_id, phone_number=TO, username=None)["username"] is None
    set_customer(harness, phone_number=TO, username="again")
    set_customer(harness, user_id="AZ.11815799212886844830", username="ghost")
    harness.control("POST", "/_sim/reset")
    assert customer(harness, user_id=user_id) == {**given, "username": None}
    assert (
        harness.http.get(
            harness.sim.base_url + "/_sim/customers",
            params={"phone_number_id": PHONE_NUMBER_ID, "user_id": "AZ.11815799212886844830"},
        ).status_code
        == 404
    )  # a customer known only by a user id is gone

    ghost = "AZ.11815799212886844830"
    only_id = set_customer(harness, user_id=ghost, username="ghost")
    assert only_id == {"phone_number": None, "wa_id": None, "user_id": ghost, "username": "ghost"}

    def status_of(method: str, **body: Any) -> int:
        if method == "GET":
            params = {"phone_number_id": PHONE_NUMBER_ID, **body}
            return harness.http.get(harness.sim.base_url + "/_sim/customers", params=params).status_code
        json = {"phone_number_id": PHONE_NUMBER_ID, **body}
        return harness.http.post(harness.sim.base_url + "/_sim/customers", json=json).status_code

    assert status_of("GET", user_id="AZ.99999999999999999999") == 404
    assert status_of("GET") == 422
    assert status_of("POST", username="nobody") == 422
    assert status_of("POST", user_id="994501234567") == 422  # not a user id
    assert status_of("POST", phone_number="12") == 422
    assert status_of("POST", phone_number=TO, user_id="AZ.11815799212886844830") == 422  # not hers
    assert status_of("POST", phone_number=TO, username="") == 422


def test_statuses_carry_contacts_user_ids_and_the_username(harness: Harness) -> None:
    harness.control("POST", "/_sim/config", json={"read_enabled": True})
    user_id = user_id_of(harness)
    plain = wamid_of(send(harness, to=TO))
    harness.receiver.wait_for(lambda r: len(r.statuses(plain)) == 3)
    for status, contact in status_values(harness, plain):
        assert contact == {"wa_id": TO, "user_id": user_id}
        assert (status["recipient_id"], status["recipient_user_id"]) == (TO, user_id)

    set_customer(harness, phone_number=TO, username="aysel.k")
    named = wamid_of(send(harness, to="+" + TO))
    harness.receiver.wait_for(lambda r: len(r.statuses(named)) == 3)
    seen = status_values(harness, named)
    assert [s["status"] for s, _ in seen] == ["sent", "delivered", "read"]
    # Sent to the number, so the number shows; the username only on delivered and read.
    assert seen[0][1] == {"wa_id": TO, "user_id": user_id}
    for _, contact in seen[1:]:
        assert contact == {"profile": {"username": "aysel.k"}, "wa_id": TO, "user_id": user_id}
    assert all(s["recipient_id"] == TO and s["recipient_user_id"] == user_id for s, _ in seen)


def test_failed_statuses_name_only_the_number_they_were_sent_to(harness: Harness) -> None:
    digits = MAGIC_UNDELIVERABLE.lstrip("+")
    failed = wamid_of(send(harness, to=MAGIC_UNDELIVERABLE))
    quirk = wamid_of(send(harness, to=MAGIC_FAILED_THEN_DELIVERED))
    harness.receiver.wait_for(lambda r: len(r.statuses(failed)) == 1 and len(r.statuses(quirk)) == 3)
    [(status, contact)] = status_values(harness, failed)
    assert contact == {"wa_id": digits}  # no WhatsApp account, so no user id
    assert status["recipient_id"] == digits and "recipient_user_id" not in status
    assert status["errors"][0]["code"] == 131026
    quirk_number = MAGIC_FAILED_THEN_DELIVERED.lstrip("+")
    contacts = [contact for _, contact in status_values(harness, quirk)]
    assert contacts == [
        {"wa_id": quirk_number, "user_id": user_id_of(harness, quirk_number)},
        {"wa_id": quirk_number},
        {"wa_id": quirk_number, "user_id": user_id_of(harness, quirk_number)},
    ]


def inbound(harness: Harness, **body: Any) -> dict[str, Any]:
    reply: dict[str, Any] = harness.control(
        "POST", "/_sim/inbound", json={"phone_number_id": PHONE_NUMBER_ID, "text": "Salam", **body}
    )
    assert reply["delivered"] is True
    return reply


def test_a_customer_with_a_username_writes_without_a_number(harness: Harness) -> None:
    user_id = user_id_of(harness)
    reply = inbound(harness, **{"from": "+" + TO}, username="aysel.k", name="Aysel", timestamp=1780000000)
    assert reply["user_id"] == user_id
    assert base64.b64encode(TO.encode()).decode() not in reply["wamid"]
    [value] = values(harness)
    assert value["contacts"] == [{"profile": {"name": "Aysel", "username": "aysel.k"}, "user_id": user_id}]
    assert value["messages"] == [
        {
            "from_user_id": user_id,
            "id": reply["wamid"],
            "timestamp": "1780000000",
            "text": {"body": "Salam"},
            "type": "text",
        }
    ]
    assert customer(harness, phone_number=TO)["username"] == "aysel.k"  # she keeps it


def test_inbound_by_user_id(harness: Harness) -> None:
    # A user id of a known number without a username: the number shows, as for "from".
    user_id = user_id_of(harness)
    inbound(harness, user_id=user_id)
    # One never seen: a customer known only by that id (a username-only user).
    stranger = "AZ.ENT.11815799212886844830"
    reply = inbound(harness, user_id=stranger, username="ghost")
    first, second = values(harness)
    assert first["contacts"] == [{"wa_id": TO, "user_id": user_id}]
    assert (first["messages"][0]["from"], first["messages"][0]["from_user_id"]) == (TO, user_id)
    assert second["contacts"] == [{"profile": {"username": "ghost"}, "user_id": stranger}]
    assert "from" not in second["messages"][0] and second["messages"][0]["from_user_id"] == stranger
    assert reply["user_id"] == stranger
    assert customer(harness, user_id=stranger)["wa_id"] is None

    def refused(**body: Any) -> int:
        json = {"phone_number_id": PHONE_NUMBER_ID, "text": "x", **body}
        return harness.http.post(harness.sim.base_url + "/_sim/inbound", json=json).status_code

    assert refused() == 422
    assert refused(user_id="not-a-user-id") == 422
    assert refused(**{"from": TO, "user_id": stranger}) == 422
