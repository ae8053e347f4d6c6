"""The conversation page on a busy day (issue 46, API.md section 12): a long thread opens at its newest
message with the Reply box focused and in view; Ctrl+Enter sends without a reload; Resolve and Reopen
without a reload; replies carry the agent's name; a failed reply offers Retry, which sends it again;
messages of one second keep their order; new messages are told to screen readers; without JavaScript
the forms still post. In a real browser, both databases, both widths."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from test_dashboard_conversations import LIVE, _conversation_with, customer_writes, sign_in

from support.harness import MAIN, Gateway, new_number, wait_for

MARKER = "window.__samePage = 'yes'"
# WAGATE_SCREENSHOTS=dir keeps the pages' pictures at both widths (to look at, or for docs/).
SHOTS = os.environ.get("WAGATE_SCREENSHOTS")


def screenshot(page: Page, name: str) -> None:
    """What the agent sees (the screen) and the whole page, when WAGATE_SCREENSHOTS asks for them."""
    if not SHOTS:
        return
    Path(SHOTS).mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(Path(SHOTS) / f"{name}-screen.png"))
    page.screenshot(path=str(Path(SHOTS) / f"{name}-full.png"), full_page=True)


def same_page(page: Page) -> bool:
    """The marker set on `window` survives: no navigation or reload happened since."""
    return bool(page.evaluate("window.__samePage === 'yes'"))


def customer_at(gateway: Gateway, number: str, text: str, timestamp: int) -> None:
    gateway.sim.http.post(
        f"{gateway.sim.url}/_sim/inbound",
        json={
            "phone_number_id": MAIN["phone_number_id"],
            "from": number,
            "text": text,
            "timestamp": timestamp,
        },
    ).raise_for_status()


def conversation(gateway: Gateway, number: str) -> int:
    return wait_for(lambda: _conversation_with(gateway, number), what="the customer's conversation")


def in_view(page: Page, selector: str) -> bool:
    """Wholly inside the viewport and not under the reply box fixed at its bottom."""
    return bool(
        page.evaluate(
            """(selector) => {
                const box = document.querySelector(selector).getBoundingClientRect();
                const reply = document.querySelector('#reply-box').getBoundingClientRect();
                const under = selector.startsWith('#reply') ? window.innerHeight : reply.top;
                return box.top >= 0 && box.bottom <= under + 0.5 && box.height > 0;
            }""",
            selector,
        )
    )


@pytest.fixture
def long_thread(gateway: Gateway) -> Iterator[tuple[str, int]]:
    """A customer who wrote 62 messages in the last hours (the sandbox's thread had 63)."""
    number = new_number()
    start = int(time.time()) - 3 * 3600
    for n in range(62):
        customer_at(gateway, number, f"Message number {n + 1} about my order", start + n * 60)
    conversation_id = conversation(gateway, number)
    wait_for(
        lambda: len(_inbound_texts(gateway, conversation_id)) == 62 or None, what="all 62 messages stored"
    )
    yield number, conversation_id


def _inbound_texts(gateway: Gateway, conversation_id: int) -> list[str]:
    from support.app_in_thread import sql

    rows = sql(
        gateway.database_url,
        "SELECT text FROM messages WHERE conversation_id = :c AND direction = 'inbound'",
        c=conversation_id,
    )
    return [row[0] for row in rows]


def test_a_long_thread_opens_at_the_newest_message_and_ctrl_enter_sends(
    page: Page, gateway: Gateway, long_thread: tuple[str, int]
) -> None:
    number, conversation_id = long_thread
    sign_in(page, gateway, "agent@acme.test", "pw-agent")
    newest = "[data-message-id]:last-child"
    for width, height in ((1280, 800), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto(f"{gateway.url}/conversations/{conversation_id}")
        expect(page.locator(newest)).to_contain_text("Message number 62")
        expect(page.get_by_label("Reply")).to_be_focused()
        assert page.evaluate("document.documentElement.scrollHeight") > 3 * height  # a long page
        wait_for(lambda: in_view(page, newest), what=f"the newest message in view at {width} px")
        assert in_view(page, "#reply"), f"the Reply box is out of view at {width} px"
        assert not page.evaluate(
            "document.documentElement.scrollWidth > document.documentElement.clientWidth"
        ), f"the page scrolls sideways at {width} px"
        screenshot(page, f"conversation-long-{width}")

    page.evaluate(MARKER)
    reply = page.get_by_label("Reply")
    reply.press_sequentially("Thank you for waiting.")
    reply.press("Enter")  # a new line, not a send
    reply.press_sequentially("It ships today.")
    assert reply.input_value() == "Thank you for waiting.\nIt ships today."
    expect(page.locator(".message.outbound")).to_have_count(0)
    reply.press("Control+Enter")
    sent = page.locator(".message.outbound")
    expect(sent).to_have_count(1)
    expect(sent.locator(".body")).to_have_text("Thank you for waiting.\nIt ships today.")
    # Labelled with the agent's name, not "Agent".
    expect(sent.locator(".author")).to_have_text("Acme Agent")
    expect(reply).to_have_value("")
    expect(reply).to_be_focused()
    assert same_page(page)
    wait_for(lambda: in_view(page, newest), what="the sent reply in view")
    [upstream] = wait_for(lambda: gateway.sim.messages(to=number.lstrip("+")) or None, what="the send")
    assert upstream["body"]["text"] == {"body": "Thank you for waiting.\nIt ships today."}

    # The customer answers: the page shows it live and tells screen readers.
    customer_writes(gateway, number, "Great, thanks!")
    expect(page.locator(newest)).to_contain_text("Great, thanks!", timeout=LIVE)
    expect(page.locator("[data-announce]")).to_contain_text("Great, thanks!")
    expect(page.locator("[data-announce]")).to_have_attribute("aria-live", "polite")
    wait_for(lambda: in_view(page, newest), what="the new message in view")
    expect(reply).to_be_focused()
    assert same_page(page)


def test_resolve_and_reopen_without_a_reload(page: Page, gateway: Gateway) -> None:
    number = new_number()
    customer_writes(gateway, number, "Hello?")
    conversation_id = conversation(gateway, number)
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/conversations/{conversation_id}")
    page.evaluate(MARKER)
    head = page.locator(".conversation-head")
    page.get_by_role("button", name="Resolve").click()
    expect(head).to_have_attribute("data-status", "resolved")
    expect(page.get_by_role("button", name="Reopen")).to_be_focused()  # the focus stays on the action
    page.get_by_role("button", name="Reopen").click()
    expect(head).to_have_attribute("data-status", "open")
    expect(page.get_by_role("button", name="Resolve")).to_be_focused()
    assert same_page(page)
    status = wait_for(
        lambda: (s := _status(gateway, conversation_id)) == "open" and s, what="the status stored"
    )
    assert status == "open"


def _status(gateway: Gateway, conversation_id: int) -> str:
    from support.app_in_thread import sql

    [(status,)] = sql(
        gateway.database_url, "SELECT status FROM conversations WHERE id = :c", c=conversation_id
    )
    return str(status)


def _last_outbound(gateway: Gateway, conversation_id: int) -> tuple[str, str | None] | None:
    from support.app_in_thread import sql

    rows = sql(
        gateway.database_url,
        "SELECT id, upstream_message_id FROM messages WHERE conversation_id = :c AND direction = 'outbound'"
        " ORDER BY created_at DESC, id DESC",
        c=conversation_id,
    )
    return (rows[0][0], rows[0][1]) if rows else None


def test_a_failed_reply_offers_retry_which_sends_it_again(page: Page, gateway: Gateway) -> None:
    number = new_number()
    customer_writes(gateway, number, "Is my parcel lost?")
    conversation_id = conversation(gateway, number)
    sign_in(page, gateway, "agent@acme.test", "pw-agent")
    page.goto(f"{gateway.url}/conversations/{conversation_id}")
    page.evaluate(MARKER)
    gateway.sim.configure(auto_statuses=False)
    try:
        page.get_by_label("Reply").fill("Let me check with the courier.")
        page.get_by_role("button", name="Send", exact=True).click()
        first = page.locator(".message.outbound")
        expect(first).to_have_count(1)
        failed_id, wamid = wait_for(
            lambda: (last := _last_outbound(gateway, conversation_id)) and last[1] and last,
            what="Meta's id for the reply",
        )
        # Meta fails it (undeliverable): the page says so and offers Retry.
        gateway.sim.http.post(
            f"{gateway.sim.url}/_sim/statuses",
            json={"phone_number_id": MAIN["phone_number_id"], "wamid": wamid, "status": "failed"},
        ).raise_for_status()
        failed = page.locator(f'[data-message-id="{failed_id}"]')
        expect(failed).to_have_attribute("data-status", "failed", timeout=LIVE)
        expect(failed.get_by_role("button", name="Retry")).to_be_visible()
        screenshot(page, "conversation-failed-1280")
    finally:
        gateway.sim.configure(auto_statuses=True)
    failed.get_by_role("button", name="Retry").click()
    # A new message with the same words, delivered; the failed one stays as it was, without Retry.
    sent = page.locator(".message.outbound")
    expect(sent).to_have_count(2)
    again = sent.last
    expect(again.locator(".body")).to_have_text("Let me check with the courier.")
    expect(again).to_have_attribute("data-status", "delivered", timeout=LIVE)
    expect(again.locator(".author")).to_have_text("Acme Agent")
    expect(failed).to_have_attribute("data-status", "failed")
    expect(page.get_by_role("button", name="Retry")).to_have_count(0)
    screenshot(page, "conversation-retried-1280")
    assert same_page(page)
    upstream = wait_for(
        lambda: len(m := gateway.sim.messages(to=number.lstrip("+"))) >= 2 and m, what="resend"
    )
    assert [m["body"]["text"]["body"] for m in upstream] == ["Let me check with the courier."] * 2


def test_messages_of_one_second_keep_their_order(page: Page, gateway: Gateway) -> None:
    number = new_number()
    second = int(time.time()) - 60
    words = ["Hi", "I ordered a blue one", "but a red one came", "can you swap it?"]
    for text in words:  # Meta stamps them with the same second
        customer_at(gateway, number, text, second)
    conversation_id = conversation(gateway, number)
    wait_for(lambda: len(_inbound_texts(gateway, conversation_id)) == 4 or None, what="the four messages")
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/conversations/{conversation_id}")
    bodies = page.locator('[data-direction="inbound"] .body')
    expect(bodies).to_have_text(words)
    # And the same after the page fetched its thread again (as live updates do).
    page.evaluate("htmx.trigger(document.getElementById('messages'), 'wagate-refresh')")
    page.get_by_label("Reply").fill("Sure, swapping it now.")
    page.get_by_label("Reply").press("Control+Enter")
    expect(page.locator(".message").last).to_contain_text("Sure, swapping it now.")
    expect(bodies).to_have_text(words)


def test_the_forms_still_post_without_javascript(browser: Browser, gateway: Gateway) -> None:
    number = new_number()
    customer_writes(gateway, number, "Anyone there?")
    conversation_id = conversation(gateway, number)
    context = browser.new_context(java_script_enabled=False, viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        sign_in(page, gateway, "agent@acme.test", "pw-agent")
        page.goto(f"{gateway.url}/conversations/{conversation_id}")
        page.get_by_label("Reply").fill("Yes, how can I help?")
        page.get_by_role("button", name="Send", exact=True).click()
        expect(page.locator(".message.outbound .body")).to_have_text("Yes, how can I help?")
        page.get_by_role("button", name="Resolve").click()
        expect(page.locator(".conversation-head")).to_have_attribute("data-status", "resolved")
    finally:
        context.close()
