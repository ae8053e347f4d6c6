"""API.md section 14, standby and handovers (Meta Business Agent), over HTTP with the simulator on both
databases: the customer's messages on `standby` land in their conversation (the window renews, the
conversation is not reopened), the agent's replies are outbound messages by "meta_business_agent"
(not the API's), `conversation.handled_by` says who holds it, and a send or a handover takes it back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.app_in_thread import running_gateway, sql
from support.harness import MAIN, Gateway, Simulator, new_number, post_meta, wait_for, window
from support.receiver import Receiver

FIXTURES = Path(__file__).parents[1] / "whatsapp" / "fixtures"
AGENT = "meta_business_agent"


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    """One gateway for the module, allowed to deliver events to the loopback receiver."""
    with running_gateway(database_url, simulator, allow_private_urls=True) as running:
        yield running


def handover(gateway: Gateway, number: str, to: str, **body: Any) -> dict[str, Any]:
    response = gateway.sim.http.post(
        f"{gateway.sim.url}/_sim/handover",
        json={"phone_number_id": MAIN["phone_number_id"], "phone_number": number, "to": to, **body},
    )
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    assert answer["delivered"] is True
    return answer


def stored(gateway: Gateway, wamid: str) -> tuple[Any, ...] | None:
    """(id, direction, sent_by, sent_as, status, conversation_id, text, cost_micros) of a message."""
    rows = sql(
        gateway.database_url,
        "SELECT id, direction, sent_by, sent_as, status, conversation_id, text, cost_micros"
        " FROM messages WHERE upstream_message_id = :w",
        w=wamid,
    )
    return rows[0] if rows else None


def usage_messages(gateway: Gateway) -> int:
    """The account's outbound messages of the last 30 days (the default span), as usage counts them."""
    response = gateway.http.get(gateway.v1("/usage"), headers=gateway.headers())
    assert response.status_code == 200, response.text
    count: int = response.json()["total"]["messages"]
    return count


def conversation_of(gateway: Gateway, message_id: str) -> dict[str, Any]:
    conversation: dict[str, Any] = gateway.message(message_id)["conversation"]
    return conversation


def test_a_standby_message_lands_in_a_resolved_conversation_without_reopening_it(gateway: Gateway) -> None:
    number = new_number()
    sent = gateway.otp(number)
    assert sent.status_code == 201, sent.text
    otp = sent.json()["id"]
    before = conversation_of(gateway, otp)
    assert (before["status"], before["handled_by"]) == ("resolved", "app")
    assert window(gateway, number)["open"] is False
    usage_before = usage_messages(gateway)

    answer = handover(gateway, number, "agent", text="Can I change the address?", reply="Yes, send it here.")
    asked = wait_for(lambda: stored(gateway, answer["wamids"]["message"]), what="the customer's message")
    echo = wait_for(
        lambda: (row := stored(gateway, answer["wamids"]["echo"])) and row[4] == "delivered" and row,
        what="the agent's reply, delivered",
    )
    # The customer's message is in the conversation; the agent holds it; it stays resolved.
    assert asked[1:3] == ("inbound", None) and asked[5] == before["id"]
    assert asked[6] == "Can I change the address?"
    assert conversation_of(gateway, otp) == {"id": before["id"], "status": "resolved", "handled_by": AGENT}
    # The window opens as for any customer message (operation 3).
    opened = window(gateway, number)
    assert opened["open"] is True and opened["seconds_remaining"] > 86_000
    # The agent's reply: an outbound message of the conversation by Meta Business Agent, sent as
    # nothing the API knows, free, moved on by its statuses.
    assert echo[1:4] == ("outbound", AGENT, None) and echo[5] == before["id"]
    assert (echo[6], echo[7]) == ("Yes, send it here.", 0)
    # Nor is it a message of the account's usage (the AI agent's replies are not the gateway's sends).
    assert usage_messages(gateway) == usage_before

    # Not sent through the API: not in its list, not readable by id.
    listed = gateway.http.get(
        gateway.v1("/whatsapp/messages"), params={"phone_number": number}, headers=gateway.headers()
    )
    assert [m["id"] for m in listed.json()["data"]] == [otp]
    assert all(m["conversation"]["handled_by"] == AGENT for m in listed.json()["data"])
    hidden = gateway.http.get(gateway.v1(f"/whatsapp/messages/{echo[0]}"), headers=gateway.headers())
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "message_not_found"

    # A send from the API takes the conversation back (the window is open: free text goes).
    reply = gateway.send({"phone_number": number, "text": "An agent here: yes, we can."})
    assert reply.status_code == 201, reply.text
    assert conversation_of(gateway, reply.json()["id"])["handled_by"] == "app"
    assert conversation_of(gateway, otp)["handled_by"] == "app"
    # Meta routes the customer's next message to the app again: it reopens the conversation.
    wait_for(lambda: gateway.sim.messages(to=number), what="the reply to reach the simulator")
    gateway.sim.inbound(MAIN["phone_number_id"], number, "Thanks!")
    wait_for(lambda: conversation_of(gateway, otp)["status"] == "open", what="the conversation to reopen")
    assert conversation_of(gateway, otp)["handled_by"] == "app"


def test_a_handover_back_to_the_app_sets_app(gateway: Gateway) -> None:
    number = new_number()
    otp = gateway.otp(number).json()["id"]
    handover(gateway, number, "agent")
    wait_for(lambda: conversation_of(gateway, otp)["handled_by"] == AGENT, what="the agent to hold it")
    handover(gateway, number, "app")
    wait_for(lambda: conversation_of(gateway, otp)["handled_by"] == "app", what="the app to hold it again")
    assert conversation_of(gateway, otp)["status"] == "resolved"  # a handover changes no status
    # Handed to the agent again, a customer message goes on standby and reopens nothing.
    handover(gateway, number, "agent", text="Me again")
    wait_for(lambda: conversation_of(gateway, otp)["handled_by"] == AGENT, what="the agent to hold it")
    gateway.sim.inbound(MAIN["phone_number_id"], number, "Still there?")
    wait_for(
        lambda: sql(gateway.database_url, "SELECT 1 FROM messages WHERE text = 'Still there?'"),
        what="the standby message",
    )
    assert conversation_of(gateway, otp) == {
        "id": conversation_of(gateway, otp)["id"],
        "status": "resolved",
        "handled_by": AGENT,
    }


def test_a_standby_message_of_a_new_customer_starts_a_resolved_conversation(gateway: Gateway) -> None:
    number = new_number()
    answer = handover(gateway, number, "agent")
    row = wait_for(lambda: stored(gateway, answer["wamids"]["message"]), what="the customer's message")
    [(status, handled_by)] = sql(
        gateway.database_url, "SELECT status, handled_by FROM conversations WHERE id = :c", c=row[5]
    )
    assert (status, handled_by) == ("resolved", AGENT)
    assert window(gateway, number)["open"] is True


def _for(number: str, body: dict[str, Any], suffix: str) -> dict[str, Any]:
    """A saved example, made about `number` and with wamids of its own."""
    digits = number.lstrip("+")
    raw = json.dumps(body).replace("994501234567", digits).replace("AZ.13491208655302741918", "AZ.1" + digits)
    raw = raw.replace("wamid.HBgM", f"wamid.{suffix}{digits}")
    data: dict[str, Any] = json.loads(raw)
    return data


def test_the_nested_shape_and_an_echo_status_that_came_first_apply(gateway: Gateway) -> None:
    number = new_number()
    stamp = str(int(time.time()))
    nested = _for(number, json.loads((FIXTURES / "standby_nested.json").read_text()), "n")
    inner = nested["entry"][0]["changes"][0]["value"]["standby"]
    for item in (inner["messages"][0], inner["message_echoes"][0], inner["statuses"][0]):
        item["timestamp"] = stamp
    # The echo's `delivered` comes before the echo itself (Meta does not promise order): parked,
    # then applied once the echo is stored.
    echo_wamid = inner["message_echoes"][0]["id"]
    early = {
        "id": echo_wamid,
        "status": "delivered",
        "timestamp": stamp,
        "recipient_id": number.lstrip("+"),
    }
    first = {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": MAIN["waba_id"],
                "changes": [
                    {
                        "field": "standby",
                        "value": {
                            "metadata": nested["entry"][0]["changes"][0]["value"]["metadata"],
                            "statuses": [early],
                        },
                    }
                ],
            }
        ],
    }
    first["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"] = MAIN["phone_number_id"]
    nested["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"] = MAIN["phone_number_id"]
    assert post_meta(gateway, first).status_code == 200
    assert post_meta(gateway, nested).status_code == 200
    echo = wait_for(
        lambda: (row := stored(gateway, echo_wamid)) and row[4] == "delivered" and row,
        what="the early status applied to the echo",
    )
    asked = wait_for(lambda: stored(gateway, inner["messages"][0]["id"]), what="the customer's message")
    assert echo[2] == AGENT and asked[1] == "inbound" and echo[5] == asked[5]
    assert window(gateway, number)["open"] is True
    # A handover names the customer by number, without metadata: the app holds it again.
    passed = _for(number, json.loads((FIXTURES / "messaging_handovers_control_passed.json").read_text()), "h")
    passed["entry"][0]["changes"][0]["value"]["recipient"]["phone_number_id"] = MAIN["phone_number_id"]
    assert post_meta(gateway, passed).status_code == 200
    wait_for(
        lambda: (
            sql(gateway.database_url, "SELECT handled_by FROM conversations WHERE id = :c", c=asked[5])
            == [("app",)]
        ),
        what="the handover to apply",
    )


def test_events_say_who_holds_the_conversation_and_none_is_about_the_agents_replies(
    gateway: Gateway, receiver: Receiver
) -> None:
    hooks = gateway.v1("/webhooks")
    made = gateway.http.post(
        hooks,
        json={"url": receiver.url("standby"), "events": ["message_created", "message_updated"]},
        headers=gateway.headers(),
    )
    assert made.status_code == 201, made.text
    try:
        number = new_number()
        answer = handover(gateway, number, "agent")
        echo = wait_for(
            lambda: (row := stored(gateway, answer["wamids"]["echo"])) and row[4] == "delivered" and row,
            what="the agent's reply, delivered",
        )
        asked = wait_for(lambda: stored(gateway, answer["wamids"]["message"]), what="the customer's message")

        def created() -> list[dict[str, Any]]:
            bodies = [r.json for r in receiver.received("standby")]
            return [b for b in bodies if b["event"] == "message_created" and b["message"]["id"] == asked[0]]

        [event] = wait_for(created, what="message_created for the standby message")
        assert event["direction"] == "inbound"
        assert event["message"]["conversation"] == {"id": asked[5], "status": "resolved", "handled_by": AGENT}
        # An API send after it: its events say the app holds the conversation again.
        sent = gateway.send({"phone_number": number, "text": "A person here"}).json()["id"]
        gateway.wait_status(sent, "delivered")

        def of_send() -> list[dict[str, Any]] | None:
            bodies = [r.json for r in receiver.received("standby") if r.json["message"]["id"] == sent]
            return bodies if len(bodies) >= 2 else None  # message_created, then delivered

        updated = wait_for(of_send, what="the send's events")
        assert {e["message"]["conversation"]["handled_by"] for e in updated} == {"app"}
        # The agent's reply and its statuses fire nothing: it was not sent through the API.
        assert [r for r in receiver.received("standby") if r.json["message"]["id"] == echo[0]] == []
    finally:
        gateway.http.delete(f"{hooks}/{made.json()['id']}", headers=gateway.headers())
