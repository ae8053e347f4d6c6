"""Held sends on the dashboard (API.md section 14): while Meta holds a template send for a quality check
(template pacing), the conversation page and the message log say so beside its status; once Meta's
statuses come, the words go without a reload. In a real browser, both databases, both widths."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from test_dashboard_conversations import conversation_of, sign_in

from support.harness import Gateway, held_template_sends, new_number, wait_for

ORDER = {"name": "order_update", "language": "en", "parameters": ["A-1", "shipped"]}
HELD_WORDS = "Held by Meta for a quality check"
# WAGATE_SCREENSHOTS=dir keeps the pages' pictures at both widths (to look at, or for docs/).
SHOTS = os.environ.get("WAGATE_SCREENSHOTS")


@pytest.fixture
def pacing(gateway: Gateway) -> Iterator[None]:
    """The simulator holds template sends until the test releases them."""
    with held_template_sends(gateway.sim):
        yield


def no_sideways_scroll(page: Page) -> bool:
    wider: bool = page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")
    return not wider


def test_the_pages_say_meta_holds_the_send_until_its_status_comes(
    page: Page, gateway: Gateway, pacing: None
) -> None:
    number = new_number()
    response = gateway.send({"phone_number": number, "template": ORDER})
    assert response.status_code == 201, response.text
    message_id = response.json()["id"]
    wait_for(
        lambda: gateway.message(message_id)["upstream_status"] == "held_for_quality_assessment",
        what="Meta's answer to be recorded",
    )
    sign_in(page, gateway)
    conversation = f"{gateway.url}/conversations/{conversation_of(gateway, message_id)}"
    shown = page.locator(f'[data-message-id="{message_id}"]')
    row = page.locator(f'tr[data-message-id="{message_id}"]')
    for width, size in ((1280, "desktop"), (390, "phone")):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(conversation)
        expect(shown).to_have_attribute("data-status", "sent")
        expect(shown.locator("[data-upstream-status]")).to_contain_text(HELD_WORDS)
        assert no_sideways_scroll(page), f"the conversation is wider than the screen at {width} px"
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(Path(SHOTS) / f"conversation-held-{size}.png"), full_page=True)
        page.goto(f"{gateway.url}/messages")
        expect(row.locator("[data-upstream-status]")).to_have_text("held by Meta for a quality check")
        expect(row).to_have_attribute("data-status", "sent")
        assert no_sideways_scroll(page), f"the message log is wider than the screen at {width} px"
        if SHOTS:
            page.screenshot(path=str(Path(SHOTS) / f"messages-held-{size}.png"), full_page=True)

    page.goto(conversation)
    expect(shown.locator("[data-upstream-status]")).to_have_count(1)
    released = gateway.sim.http.post(f"{gateway.sim.url}/_sim/held/release", json={"to": number})
    assert released.json() == {"released": 1}
    # Meta's statuses move it on: the page changes by itself.
    expect(shown).to_have_attribute("data-status", "delivered")
    expect(shown.locator("[data-upstream-status]")).to_have_count(0)
    page.goto(f"{gateway.url}/messages")
    expect(row).to_have_attribute("data-status", "delivered")
    expect(row.locator("[data-upstream-status]")).to_have_count(0)
