"""Settings > Audit log (issue 14, point 6) in Chromium, on both databases: an administrator sees who
changed what, newest first, filters by action, and the page fits a phone; it is in the settings'
navigation; an agent gets the 403 page."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect
from test_settings_access import sign_in

from support.harness import Gateway


def test_an_administrator_reads_the_audit_log_and_filters_it(page: Page, gateway: Gateway) -> None:
    # A change made in the browser first: it is the newest entry.
    sign_in(page, gateway, "/settings/api-keys")
    page.get_by_label("Name").fill("audit-browser")
    page.get_by_role("button", name="Create API key").click()
    expect(page.locator("[data-secret]")).to_have_count(1)

    page.get_by_role("navigation", name="Settings").get_by_role("link", name="Audit log").click()
    expect(page).to_have_url(re.compile(r"/settings/audit$"))
    expect(page.get_by_role("link", name="Audit log")).to_have_attribute("aria-current", "page")
    rows = page.locator("tr[data-audit-id]")
    expect(rows.first).to_contain_text("api_key.created")
    expect(rows.first).to_contain_text("admin@acme.test")
    expect(rows.first).to_contain_text("in the dashboard")
    expect(rows.first).to_contain_text("audit-browser")
    ids = [int(i) for i in rows.evaluate_all("rows => rows.map(r => r.dataset.auditId)")]
    assert ids == sorted(ids, reverse=True) and len(ids) > 5
    # Provisioning's entries say so, and no secret is shown.
    expect(page.locator('tr[data-action="channel.created"]').first).to_contain_text("Provisioning")
    expect(page.locator('tr[data-action="channel.created"]').first).to_contain_text("access token: set")
    expect(page.get_by_text("EAAG-test-Main")).to_have_count(0)

    page.get_by_label("Action").select_option("membership.added")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"action=membership\.added"))
    actions = set(rows.evaluate_all("rows => rows.map(r => r.dataset.action)"))
    assert actions == {"membership.added"}
    expect(page.get_by_label("Action")).to_have_value("membership.added")

    # On a phone the table becomes labelled rows and nothing is wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{gateway.url}/settings/audit")
    expect(rows.first).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width


def test_an_agent_gets_the_403_page(page: Page, gateway: Gateway) -> None:
    sign_in(page, gateway, "/settings/audit", email="agent@acme.test", password="pw-agent")
    expect(page.locator("tr[data-audit-id]")).to_have_count(0)
    expect(page.get_by_text("administrator", exact=False).first).to_be_visible()
