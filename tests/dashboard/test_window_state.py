"""The customer's window on the conversation page (issue 46, API.md section 12): `data-window` says
"open", "closing" (under 4 hours left) or "closed", in words and colours (amber, red under an hour);
with the window closed the Template picker starts with nothing chosen, the recently used templates
first, and an empty send is refused in words. In a real browser, both databases."""

from __future__ import annotations

import re
import time

from playwright.sync_api import Page, expect
from test_conversation_thread import MARKER, conversation, customer_at, same_page, screenshot
from test_dashboard_conversations import conversation_of, sign_in

from support.harness import Gateway, new_number

HOUR = 3600


def open_conversation_of_customer(page: Page, gateway: Gateway, wrote_seconds_ago: int) -> None:
    number = new_number()
    customer_at(gateway, number, "Hello, is anyone there?", int(time.time()) - wrote_seconds_ago)
    page.goto(f"{gateway.url}/conversations/{conversation(gateway, number)}")


def test_the_window_is_open_then_closing_then_urgent_in_words_and_colour(
    page: Page, gateway: Gateway
) -> None:
    sign_in(page, gateway)
    window = page.locator("[data-window]")  # one element says it (strict: a second would fail)
    words = page.locator("#reply-box [data-window-words]")

    open_conversation_of_customer(page, gateway, 60)
    expect(window).to_have_attribute("data-window", "open")
    expect(words).to_have_text(re.compile(r"^Window open: 23 h \d+ min left$"))
    expect(words).not_to_have_class(re.compile(r"urgent"))
    expect(page.get_by_label("Reply")).to_be_focused()

    open_conversation_of_customer(page, gateway, 21 * HOUR)
    expect(window).to_have_attribute("data-window", "closing")
    expect(words).to_have_text(re.compile(r"^Window closes in (2 h 59 min|3 h) — reply now$"))
    expect(words).to_have_class(re.compile(r"\bwindow-closing\b"))
    expect(words).not_to_have_class(re.compile(r"urgent"))
    amber = words.evaluate("el => getComputedStyle(el).backgroundColor")
    expect(page.get_by_label("Reply")).to_be_visible()  # free text still goes

    open_conversation_of_customer(page, gateway, 24 * HOUR - 39 * 60 - 30)
    expect(window).to_have_attribute("data-window", "closing")
    expect(words).to_have_text(re.compile(r"^Window closes in 39 min — reply now$"))
    expect(words).to_have_class(re.compile(r"\burgent\b"))
    red = words.evaluate("el => getComputedStyle(el).backgroundColor")
    assert red != amber, "an urgent window looks like any closing one"
    head = page.locator(".conversation-head [data-window-words]")
    expect(head).to_have_text(re.compile(r"^Window closes in 39 min — reply now$"))
    screenshot(page, "conversation-urgent-1280")

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(words).to_be_visible()
    screenshot(page, "conversation-urgent-390")
    assert not page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")

    open_conversation_of_customer(page, gateway, 25 * HOUR)
    expect(window).to_have_attribute("data-window", "closed")
    expect(words).to_have_text("Window closed: only templates can be sent")
    expect(page.get_by_label("Reply")).to_be_hidden()


def test_a_closed_window_starts_with_no_template_and_recently_used_first(
    page: Page, gateway: Gateway
) -> None:
    # The account's last template sends on Main: an OTP, then an order update (the most recent).
    assert gateway.otp(new_number()).status_code == 201
    number = new_number()
    order = {"name": "order_update", "language": "en", "parameters": ["A-7", "packed"]}
    sent = gateway.send({"phone_number": number, "template": order})
    assert sent.status_code == 201, sent.text
    sign_in(page, gateway, "agent@acme.test", "pw-agent")
    page.goto(f"{gateway.url}/conversations/{conversation_of(gateway, sent.json()['id'])}")
    expect(page.locator("[data-window]")).to_have_attribute("data-window", "closed")
    picker = page.get_by_label("Template", exact=True)
    expect(picker).to_be_focused()
    expect(picker).to_have_value("")  # nothing chosen: no template goes by one click
    expect(picker.locator("option:checked")).to_have_text("Choose a template")
    recent = picker.locator('optgroup[label="Recently used"] option')
    assert recent.evaluate_all("options => options.map(o => o.value)")[:2] == [
        "order_update|en",
        "otp_code|en",
    ]
    first_template = picker.locator("option:not([value=''])").first
    expect(first_template).to_have_attribute("value", "order_update|en")
    expect(page.locator("fieldset[data-variables-for]:not([hidden])")).to_have_count(0)
    screenshot(page, "conversation-closed-1280")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "conversation-closed-390")
    page.set_viewport_size({"width": 1280, "height": 900})

    # Sent with nothing chosen (the browser's own check bypassed): refused in words, nothing sent.
    page.evaluate(MARKER)
    page.locator("[data-template-picker]").evaluate("form => { form.noValidate = true; }")
    page.get_by_role("button", name="Send template").click()
    expect(page.locator("#reply-error [role=alert]")).to_contain_text("Choose a template")
    screenshot(page, "conversation-refused-1280")
    assert same_page(page)
    expect(page.locator(".message.outbound")).to_have_count(1)

    picker.select_option(value="order_update|en")
    values = page.locator("fieldset:not([hidden])")
    values.get_by_label("Body {{1}}").fill("A-7")
    values.get_by_label("Body {{2}}").fill("shipped")
    page.get_by_role("button", name="Send template").click()
    expect(page.locator(".message.outbound")).to_have_count(2)
    expect(page.locator(".message.outbound").last).to_contain_text("Your order A-7 is now shipped.")
    expect(page.locator("#reply-error [role=alert]")).to_have_count(0)
    expect(picker).to_have_value("")  # ready for the next, nothing chosen again
    assert same_page(page)
