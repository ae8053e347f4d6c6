"""Every dashboard page at a phone's width (issue 46, point 6; API.md section 12 "On a busy day"), in
Chromium on both databases: no page scrolls sideways at 390 px, the main navigation folds behind a
`Menu` button that opens it by mouse and keyboard (and shows its links without JavaScript), tables show
all their columns, and the charts' labels stay readable."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect
from test_dashboard_conversations import sign_in

from support.app_in_thread import running_gateway
from support.harness import Gateway, Simulator, new_number
from support.receiver import Receiver
from wagate.simulator.magic import MAGIC_UNDELIVERABLE

PHONE = {"width": 390, "height": 844}
OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
MAIN_LINKS = ["Conversations", "Messages", "Usage", "Bulk", "Settings"]
# Pages other sessions are rebuilding (the conversation list, the thread, the bulk form): only the
# sideways scroll is asserted there.
IN_PROGRESS = {"conversations", "conversation", "bulk new"}


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    """Webhooks may point at the loopback receiver here, so that a webhook's own pages exist."""
    with running_gateway(database_url, simulator, allow_private_urls=True) as running:
        yield running


@pytest.fixture(scope="module")
def world(gateway: Gateway, receiver: Receiver) -> dict[str, Any]:
    """A failed send (a bar in the failure chart, a conversation), a webhook and a batch."""
    ok = gateway.send({"channel_id": gateway.ids["main"], "phone_number": new_number(), "template": OTP})
    failed = gateway.send(
        {"channel_id": gateway.ids["main"], "phone_number": MAGIC_UNDELIVERABLE, "template": OTP}
    )
    assert ok.status_code == failed.status_code == 201, failed.text
    conversation = gateway.wait_status(failed.json()["id"], "failed")["conversation"]["id"]
    webhook = gateway.http.post(
        gateway.v1("/webhooks"),
        headers=gateway.headers(),
        json={"url": receiver.url("phone"), "events": ["message_updated"]},
    )
    assert webhook.status_code == 201, webhook.text
    try:
        batch = gateway.http.post(
            gateway.v1("/whatsapp/bulk_messages"),
            headers=gateway.headers(),
            json={
                "channel_id": gateway.ids["main"],
                "template": OTP,
                "phone_numbers": [new_number(), new_number(), "+99450"],
            },
        )
        refusal = "" if batch.status_code == 202 else batch.text
    except httpx.HTTPError as exc:
        refusal = repr(exc)
    return {
        "conversation": conversation,
        # Asserted by the tests that need it, so that the other pages are checked meanwhile.
        "batch": None if refusal else batch.json()["batch_id"],
        "batch_refusal": refusal,
        "webhook": webhook.json()["id"],
    }


def pages(world: dict[str, Any]) -> dict[str, str]:
    webhook = f"/settings/integrations/webhooks/{world['webhook']}"
    return {
        "conversations": "/conversations",
        "conversation": f"/conversations/{world['conversation']}",
        "message log": "/messages",
        "usage": "/usage",
        "bulk list": "/bulk",
        "bulk new": "/bulk/new",
        **({"batch": f"/bulk/{world['batch']}"} if world["batch"] else {}),
        "webhooks": "/settings/integrations/webhooks",
        "webhook": webhook,
        "webhook edit": f"{webhook}/edit",
        "api keys": "/settings/api-keys",
        "inboxes": "/settings/inboxes",
        "templates": "/settings/templates",
        "audit log": "/settings/audit",
        "error page": "/settings/api-keys?before=abc",
    }


def scroll_width(page: Page) -> int:
    width: int = page.evaluate("document.documentElement.scrollWidth")
    return width


def on_screen(cell: Locator) -> None:
    """Wholly on the screen once scrolled down to: not cut off, not off to the side."""
    cell.scroll_into_view_if_needed()
    expect(cell).to_be_in_viewport(ratio=1)


def main_links(page: Page) -> list[Locator]:
    nav = page.get_by_role("navigation", name="Main")
    return [nav.get_by_role("link", name=name, exact=True) for name in MAIN_LINKS]


def test_no_page_scrolls_sideways_and_the_menu_opens(
    page: Page, gateway: Gateway, world: dict[str, Any]
) -> None:
    page.set_viewport_size(PHONE)
    page.goto(f"{gateway.url}/login")
    assert scroll_width(page) <= PHONE["width"], "login"
    sign_in(page, gateway)
    wide = {}
    for name, path in pages(world).items():
        page.goto(f"{gateway.url}{path}")
        expect(page.get_by_role("button", name="Sign out")).to_be_visible()
        if scroll_width(page) > PHONE["width"]:
            wide[name] = scroll_width(page)
        if name in IN_PROGRESS:
            continue
        menu = page.get_by_role("button", name="Menu", exact=True)
        expect(menu).to_be_visible()
        expect(menu).to_have_attribute("aria-expanded", "false")
        for link in main_links(page):
            expect(link).to_be_hidden()
        menu.click()
        expect(menu).to_have_attribute("aria-expanded", "true")
        for link in main_links(page):
            expect(link).to_be_visible()
        assert scroll_width(page) <= PHONE["width"], f"{name} with the menu open"
    assert wide == {}, f"pages wider than {PHONE['width']} px: {wide}"
    assert world["batch"], f"no batch to show: {world['batch_refusal']}"


def test_the_menu_works_by_keyboard_and_stays_out_of_the_way_on_a_desktop(
    page: Page, gateway: Gateway
) -> None:
    page.set_viewport_size(PHONE)
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/messages")
    menu = page.get_by_role("button", name="Menu", exact=True)
    expect(menu).to_have_attribute("aria-controls", "main-nav")
    menu.focus()
    page.keyboard.press("Enter")
    expect(menu).to_have_attribute("aria-expanded", "true")
    page.keyboard.press("Tab")
    expect(
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Conversations")
    ).to_be_focused()
    page.keyboard.press("Escape")
    expect(menu).to_have_attribute("aria-expanded", "false")
    expect(menu).to_be_focused()
    page.keyboard.press("Space")
    expect(menu).to_have_attribute("aria-expanded", "true")
    # Following a link closes nothing by hand: the next page starts folded.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Usage").click()
    expect(page).to_have_url(re.compile(r"/usage"))
    expect(page.get_by_role("button", name="Menu", exact=True)).to_have_attribute("aria-expanded", "false")
    # A desktop shows the links as before, without the button.
    page.set_viewport_size({"width": 1280, "height": 900})
    expect(page.get_by_role("button", name="Menu", exact=True)).to_be_hidden()
    for link in main_links(page):
        expect(link).to_be_visible()


def test_without_javascript_the_links_show(browser: Browser, gateway: Gateway) -> None:
    context: BrowserContext = browser.new_context(viewport=PHONE, java_script_enabled=False)
    try:
        page = context.new_page()
        sign_in(page, gateway)
        page.goto(f"{gateway.url}/usage")
        expect(page.get_by_role("button", name="Menu", exact=True)).to_be_hidden()
        for link in main_links(page):
            expect(link).to_be_visible()
        assert scroll_width(page) <= PHONE["width"]
    finally:
        context.close()


def test_tables_show_every_column_and_charts_read_at_phone_width(
    page: Page, gateway: Gateway, world: dict[str, Any]
) -> None:
    page.set_viewport_size(PHONE)
    sign_in(page, gateway)
    # Usage: each row's figures and the totals are on screen, each under its column's name.
    page.goto(f"{gateway.url}/usage")
    total = page.locator("[data-usage-total]")
    for label in ("Messages", "Failed", "Amount"):
        cell = total.locator(f'td[data-label="{label}"]')
        on_screen(cell)
        assert cell.evaluate("c => getComputedStyle(c, '::before').content") == f'"{label}"'
    on_screen(page.locator("[data-usage-row]").first.locator('td[data-label="Amount"]'))
    # Chart labels: the phone's drawing, text at least 10 px tall (a desktop chart scaled down to a
    # phone draws 12 px text at about 5).
    for path, chart in (("/messages", "failures"), ("/usage", "usage")):
        page.goto(f"{gateway.url}{path}")
        texts = page.locator(f'[data-chart="{chart}"] svg:visible text')
        assert texts.count() >= 3, path
        heights = texts.evaluate_all("all => all.map(t => t.getBoundingClientRect().height)")
        assert min(heights) >= 10, (path, heights)
        assert page.locator(f'[data-chart="{chart}"] svg:visible').count() == 1
    # The bulk list: the batch's progress is in view.
    assert world["batch"], f"no batch to show: {world['batch_refusal']}"
    page.goto(f"{gateway.url}/bulk")
    progress = page.locator(f'tr[data-batch-id="{world["batch"]}"] td[data-label="Progress"]')
    on_screen(progress)
    expect(progress).to_contain_text("of 3")
