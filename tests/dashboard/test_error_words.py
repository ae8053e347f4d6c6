"""Errors in words on every page (issue 46, point 8), on both databases: one Meta error code carries the
same name on the message log, its chart and the conversation's thread (Meta's own title for 131047 is
"Re-engagement message"; the pages say what it means), and a refused form or address names its fields
as the page does, never by the API's field names."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect
from test_dashboard_conversations import sign_in

from support.harness import MAIN, Gateway, new_number, signed_in, wait_for
from wagate.core.errors import InvalidPhoneNumber, InvalidRequest
from wagate.dashboard.views import FailureName, error_words, failure_name
from wagate.simulator.magic import MAGIC_REENGAGEMENT

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
NAME = "131047 24-hour window closed"
TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


def words(text: str | None) -> str:
    return " ".join((text or "").split())


def test_one_meta_error_has_one_name_on_every_page(page: Page, gateway: Gateway) -> None:
    sent = gateway.send({"phone_number": MAGIC_REENGAGEMENT, "template": OTP})
    assert sent.status_code == 201, sent.text
    message_id = sent.json()["id"]
    failed = gateway.wait_status(message_id, "failed")
    # What Meta said is kept as it said it (the API shows it); the pages name the code one way.
    assert failed["external_error"].startswith("131047: Re-engagement")
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/messages?error_code=131047")
    in_log = page.locator(f'tr[data-message-id="{message_id}"] [data-failure-name]')
    expect(in_log).to_be_visible()
    assert words(in_log.text_content()) == NAME
    in_chart = page.locator('[data-chart="failures"] [data-reason="131047"] a')
    assert words(in_chart.text_content()) == NAME
    page.goto(f"{gateway.url}/conversations/{failed['conversation']['id']}")
    in_thread = page.locator(f'[data-message-id="{message_id}"] .failure strong').first
    expect(in_thread).to_be_visible()
    assert words(in_thread.text_content()) == NAME


def test_refusals_name_fields_as_the_page_does(gateway: Gateway) -> None:
    with signed_in(gateway) as client:
        usage = client.get("/usage?channel_id=abc")
        assert usage.status_code == 422
        text = usage.text.replace("&#39;", "'")
        assert "Channel: must be a channel's id" in text
        assert "channel_id" not in text.split('role="alert"')[1].split("</p>")[0]
        # The reply box: the API's `text` is the page's Message.
        customer = new_number()
        gateway.sim.inbound(MAIN["phone_number_id"], customer, "hello")
        found = wait_for(
            lambda: re.search(
                r'data-conversation-id="(\d+)"', client.get(f"/conversations?q={customer[-7:]}").text
            ),
            what="the customer's conversation",
        )
        conversation = f"/conversations/{found.group(1)}"
        token = TOKEN.search(client.get(conversation).text)
        assert token is not None
        refused = client.post(
            f"{conversation}/reply", data={"text": "x" * 5000, "csrf_token": token.group(1)}
        )
        assert refused.status_code == 422
        said = words(refused.text)
        assert "Message: String should have at most 4096 characters" in said
        assert "text: String" not in said


def test_the_names_and_words_themselves() -> None:
    assert failure_name("131047: Re-engagement message") == FailureName(131047, "24-hour window closed")
    assert str(failure_name("131026: Message undeliverable")) == "131026 Message undeliverable"
    assert str(failure_name("131026")) == "131026 Message undeliverable"  # a chart's reason
    assert str(failure_name("139999: Something new")) == "139999 Something new"  # Meta's title, unexplained
    assert str(failure_name("expired: not handed to WhatsApp within 30 s")) == (
        "Expired: not handed to WhatsApp within 30 s"
    )
    assert str(failure_name("invalid_phone_number")) == "Invalid phone number"
    assert failure_name(None) is None
    summary = InvalidRequest(
        "The request is not valid: template.parameters.1: too long; phone_number: not valid",
        details=[
            {"field": "template.parameters.1", "issue": "too long"},
            {"field": "phone_number", "issue": "not valid"},
        ],
    )
    assert error_words(summary) == "Template value Body {{1}}: too long; Number: not valid."
    # Already in words: kept as it is.
    in_words = InvalidPhoneNumber(details=[{"field": "phone_number", "issue": "not a valid phone number"}])
    assert error_words(in_words) == in_words.message
