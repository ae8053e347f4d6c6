"""Status and inbound webhooks: signed, in Meta's envelope, ordered, and retried until delivered."""

from __future__ import annotations

from sim_harness import APP_SECRET, PHONE_NUMBER_ID, WABA_ID, Harness, Receiver

from wagate.simulator import (
    MAGIC_FAILED_THEN_DELIVERED,
    MAGIC_REENGAGEMENT,
    MAGIC_SENT_ONLY,
    MAGIC_UNDELIVERABLE,
    run_in_thread,
)
from wagate.simulator.server import bind_socket
from wagate.whatsapp.outbound import authentication_components, template_message, text_message
from wagate.whatsapp.payloads import StatusKind
from wagate.whatsapp.webhook_body import parse_webhook

TO = "994501234567"


def sent_wamid(harness: Harness, body: dict[str, object]) -> str:
    response = harness.send(body)
    assert response.status_code == 200, response.text
    return str(response.json()["messages"][0]["id"])


def status_names(receiver: Receiver, wamid: str) -> list[str]:
    return [s["status"] for s in receiver.statuses(wamid)]


def test_sent_then_delivered_in_metas_envelope(harness: Harness) -> None:
    wamid = sent_wamid(
        harness, template_message(TO, "otp_code", "en", authentication_components("1234"), "msg_9")
    )
    harness.receiver.wait_for(lambda r: len(r.statuses(wamid)) == 2)
    assert status_names(harness.receiver, wamid) == ["sent", "delivered"]
    body = harness.receiver.snapshot()[0]
    assert body["object"] == "whatsapp_business_account"
    [entry] = body["entry"]
    assert entry["id"] == WABA_ID
    [change] = entry["changes"]
    assert change["field"] == "messages"
    value = change["value"]
    assert value["messaging_product"] == "whatsapp"
    assert value["metadata"] == {"display_phone_number": "15550001111", "phone_number_id": PHONE_NUMBER_ID}
    [status] = value["statuses"]
    assert status["recipient_id"] == TO
    assert status["biz_opaque_callback_data"] == "msg_9"
    assert status["timestamp"].isdigit()
    assert status["pricing"] == {
        "billable": True,
        "pricing_model": "PMP",
        "type": "regular",
        "category": "authentication",
    }
    assert status["conversation"]["origin"] == {"type": "authentication"}
    # The gateway's own parser reads it.
    [parsed] = parse_webhook(body).changes
    assert parsed.statuses[0].status is StatusKind.SENT
    assert parsed.statuses[0].biz_opaque_callback_data == "msg_9"
    assert harness.receiver.bad_signatures == 0


def test_read_when_enabled(harness: Harness) -> None:
    # The rules before 2026-10-01 (tests/simulator/test_sim_pricing.py has those since).
    harness.control("POST", "/_sim/config", json={"read_enabled": True, "pricing_date": "2026-09-30"})
    wamid = sent_wamid(harness, text_message(TO, "hi"))
    harness.receiver.wait_for(lambda r: len(r.statuses(wamid)) == 3)
    assert status_names(harness.receiver, wamid) == ["sent", "delivered", "read"]
    assert harness.receiver.statuses(wamid)[0]["pricing"]["billable"] is False  # a session message is free


def test_reordered_and_duplicated_statuses(harness: Harness) -> None:
    harness.control("POST", "/_sim/config", json={"read_enabled": True, "reorder_statuses": True})
    wamid = sent_wamid(harness, text_message(TO, "hi"))
    harness.receiver.wait_for(lambda r: len(r.statuses(wamid)) == 3)
    assert status_names(harness.receiver, wamid) == ["read", "delivered", "sent"]

    harness.control(
        "POST",
        "/_sim/config",
        json={"read_enabled": False, "reorder_statuses": False, "duplicate_statuses": True},
    )
    wamid = sent_wamid(harness, text_message(TO, "again"))
    harness.receiver.wait_for(lambda r: len(r.statuses(wamid)) == 4)
    assert status_names(harness.receiver, wamid) == ["sent", "sent", "delivered", "delivered"]


def test_magic_numbers_fail_after_a_200(harness: Harness) -> None:
    expected = {
        MAGIC_UNDELIVERABLE: (131026, "Message undeliverable"),
        MAGIC_REENGAGEMENT: (131047, "Re-engagement message"),
    }
    wamids = {number: sent_wamid(harness, text_message(number, "hi", "cb")) for number in expected}
    harness.receiver.wait_for(lambda r: all(r.statuses(w) for w in wamids.values()))
    for number, (code, title) in expected.items():
        [status] = harness.receiver.statuses(wamids[number])
        assert status["status"] == "failed"
        assert status["biz_opaque_callback_data"] == "cb"
        [error] = status["errors"]
        assert (error["code"], error["title"], error["message"]) == (code, title, title)
        assert error["error_data"]["details"]
        assert "pricing" not in status


def test_sent_only_and_delivered_after_failed(harness: Harness) -> None:
    only_sent = sent_wamid(harness, text_message(MAGIC_SENT_ONLY, "hi"))
    quirk = sent_wamid(harness, text_message(MAGIC_FAILED_THEN_DELIVERED, "hi"))
    harness.receiver.wait_for(lambda r: len(r.statuses(quirk)) == 3)
    assert status_names(harness.receiver, quirk) == ["sent", "failed", "delivered"]
    assert status_names(harness.receiver, only_sent) == ["sent"]


def test_webhooks_are_retried_until_the_receiver_is_back(harness: Harness) -> None:
    # Reserve a port, close it, and point the simulator at it: connection refused for a while.
    probe = bind_socket()
    port = probe.getsockname()[1]
    probe.close()
    harness.control("POST", "/_sim/config", json={"webhook_url": f"http://127.0.0.1:{port}/hook"})
    wamid = sent_wamid(harness, text_message(TO, "hi", "late"))
    late_receiver = Receiver()
    harness.receiver.wait_for(
        lambda _: harness.control("GET", "/_sim/stats")["webhooks"]["failed_attempts"] >= 3,
        what="failed attempts",
    )
    with run_in_thread(late_receiver.app, port=port):
        late_receiver.wait_for(lambda r: len(r.statuses(wamid)) == 2)
        assert status_names(late_receiver, wamid) == ["sent", "delivered"]
    assert harness.control("GET", "/_sim/idle", params={"seconds": 2})["idle"] is True


def test_non_2xx_is_retried_and_signature_uses_app_secret(harness: Harness) -> None:
    harness.receiver.reply_status = 500
    wamid = sent_wamid(harness, text_message(TO, "hi"))
    harness.receiver.wait_for(
        lambda _: harness.control("GET", "/_sim/stats")["webhooks"]["failed_attempts"] >= 2,
        what="failed attempts",
    )
    harness.receiver.reply_status = 200
    harness.receiver.wait_for(lambda r: len(r.statuses(wamid)) == 2)

    harness.control("POST", "/_sim/config", json={"app_secret": "another-secret"})
    sent_wamid(harness, text_message(TO, "hi"))
    harness.receiver.wait_for(lambda r: r.bad_signatures > 0, what="a rejected signature")
    assert APP_SECRET != "another-secret"


def test_inbound_customer_message(harness: Harness) -> None:
    reply = harness.control(
        "POST",
        "/_sim/inbound",
        json={
            "phone_number_id": PHONE_NUMBER_ID,
            "from": "+994501234567",
            "text": "Salam",
            "name": "Aysel",
            "timestamp": 1750000000,
        },
    )
    assert reply["delivered"] is True
    user_id = harness.control(
        "GET", "/_sim/customers", params={"phone_number_id": PHONE_NUMBER_ID, "phone_number": "+" + TO}
    )["user_id"]
    assert reply["user_id"] == user_id
    [body] = harness.receiver.snapshot()
    value = body["entry"][0]["changes"][0]["value"]
    assert value["contacts"] == [{"profile": {"name": "Aysel"}, "wa_id": TO, "user_id": user_id}]
    assert value["messages"] == [
        {
            "from": TO,
            "from_user_id": user_id,
            "id": reply["wamid"],
            "timestamp": "1750000000",
            "text": {"body": "Salam"},
            "type": "text",
        }
    ]
    [change] = parse_webhook(body).changes
    [message] = change.messages
    assert (message.from_, message.text, message.profile_name, message.wamid) == (
        TO,
        "Salam",
        "Aysel",
        reply["wamid"],
    )


def test_pushed_status_uses_the_logged_message(harness: Harness) -> None:
    harness.control("POST", "/_sim/config", json={"auto_statuses": False})
    wamid = sent_wamid(harness, text_message(TO, "hi", "msg_77"))
    reply = harness.control(
        "POST",
        "/_sim/statuses",
        json={
            "phone_number_id": PHONE_NUMBER_ID,
            "wamid": wamid,
            "status": "failed",
            "errors": [
                {
                    "code": 131049,
                    "title": "This message was not delivered to maintain healthy ecosystem engagement.",
                }
            ],
        },
    )
    assert reply == {"delivered": True}
    [status] = harness.receiver.statuses(wamid)
    assert status["recipient_id"] == TO
    assert status["biz_opaque_callback_data"] == "msg_77"
    assert status["errors"][0]["code"] == 131049


def test_webhook_url_set_later_still_gets_pending_statuses(harness: Harness) -> None:
    url = harness.control("GET", "/_sim/config")["webhook_url"]
    harness.control("POST", "/_sim/config", json={"webhook_url": None})
    wamid = sent_wamid(harness, text_message(TO, "hi"))
    harness.receiver.wait_for(
        lambda _: harness.control("GET", "/_sim/stats")["webhooks"]["failed_attempts"] >= 1,
        what="failed attempts",
    )
    harness.control("POST", "/_sim/config", json={"webhook_url": url})
    harness.receiver.wait_for(lambda r: len(r.statuses(wamid)) == 2)


def test_a_utility_template_in_the_customers_window_is_not_billable(harness: Harness) -> None:
    # Until 2026-09-30 (tests/simulator/test_sim_pricing.py has the rules since).
    harness.control("POST", "/_sim/config", json={"pricing_date": "2026-09-30"})
    other = "994551234567"
    harness.control(
        "POST", "/_sim/inbound", json={"phone_number_id": PHONE_NUMBER_ID, "from": "+" + TO, "text": "hi"}
    )
    order = ["A-1", "shipped"]
    components = [{"type": "body", "parameters": [{"type": "text", "text": value} for value in order]}]
    in_window = sent_wamid(harness, template_message(TO, "order_update", "en", components))
    outside = sent_wamid(harness, template_message(other, "order_update", "en", components))
    harness.receiver.wait_for(lambda r: r.statuses(in_window) and r.statuses(outside))
    assert harness.receiver.statuses(in_window)[0]["pricing"] == {
        "billable": False,
        "pricing_model": "PMP",
        "type": "free_customer_service",
        "category": "utility",
    }
    assert harness.receiver.statuses(outside)[0]["pricing"]["billable"] is True
