"""The message log (issue 12, point 4): `/messages` in a real browser and over HTTP, on both databases:
filters, `Older` paging, the CSV equal to the rows, the chart of failures by error code (the simulator's
+994500001026 fails with 131026), only the user's inboxes."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect
from test_conversation_list import signed_in
from test_dashboard_conversations import sign_in

from support.harness import MAIN, Gateway, new_number, wait_for
from wagate.simulator.magic import MAGIC_UNDELIVERABLE

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
ROW = re.compile(r'<tr data-message-id="([^"]+)" data-status="([a-z]+)">')
OLDER = re.compile(r'<a class="more" href="([^"]+)">Older</a>')


def send(gateway: Gateway, channel: str, number: str) -> str:
    response = gateway.send({"channel_id": gateway.ids[channel], "phone_number": number, "template": OTP})
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    return message_id


@pytest.fixture(scope="module")
def world(gateway: Gateway) -> dict[str, Any]:
    """55 sends on Main (more than a page), one of them failing with 131026, and one on Second."""
    number = new_number()
    main = [send(gateway, "main", number) for _ in range(3)]
    main += [send(gateway, "main", new_number()) for _ in range(51)]
    failed = send(gateway, "main", MAGIC_UNDELIVERABLE)
    second = send(gateway, "second", new_number())
    gateway.wait_status(failed, "failed")
    return {"main": main, "failed": failed, "second": second, "number": number}


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def rows_of(page: Page) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = page.eval_on_selector_all(
        "tr[data-message-id]", "rows => rows.map(r => [r.dataset.messageId, r.dataset.status])"
    )
    return [tuple(r) for r in found]  # type: ignore[misc]


def download(page: Page) -> list[dict[str, str]]:
    with page.expect_download() as info:
        page.get_by_role("link", name="Download CSV").click()
    return csv_rows(Path(info.value.path()).read_text(encoding="utf-8"))


def test_the_log_pages_filters_exports_and_charts_failures(
    page: Page, gateway: Gateway, world: dict[str, Any]
) -> None:
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/messages")
    expect(page.get_by_role("heading", name="Messages", exact=True)).to_be_visible()
    # The chart: the failure, under its code and Meta's title, drawn as a bar.
    chart = page.locator("[data-chart]")
    expect(chart).to_be_visible()
    expect(chart.locator('[data-reason="131026"]')).to_contain_text("131026")
    expect(chart.locator('[data-reason="131026"] .count')).to_have_text("1")
    assert chart.locator("svg rect").count() >= 1
    assert "131026" in (chart.locator("svg rect title").first.text_content() or "")
    # Page 1: 50 rows, newest first; Older leads on without repeating or skipping one.
    first = rows_of(page)
    assert len(first) == 50
    assert first[0][0] == world["second"] and first[1][0] == world["failed"]
    everything = download(page)
    assert [r["message_id"] for r in everything[:50]] == [r for r, _ in first]
    page.get_by_role("link", name="Older").click()
    second = rows_of(page)
    ids = [r for r, _ in first + second]
    assert len(ids) == len(set(ids)) == 56
    assert set(ids) == {*world["main"], world["failed"], world["second"]}
    assert [r["message_id"] for r in everything] == ids
    expect(page.get_by_role("link", name="Older")).to_have_count(0)
    page.get_by_role("link", name="Newest").click()
    assert rows_of(page) == first
    # Each row leads to its conversation.
    page.locator(f'tr[data-message-id="{world["failed"]}"] a').first.click()
    expect(page).to_have_url(re.compile(r"/conversations/\d+$"))
    expect(page.locator(f'[data-message-id="{world["failed"]}"]')).to_have_attribute("data-status", "failed")

    # Filters: status, then the number (any form) with the channel, then the error code.
    page.goto(f"{gateway.url}/messages")
    page.get_by_label("Status").select_option("failed")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"status=failed"))
    assert rows_of(page) == [(world["failed"], "failed")]
    exported = download(page)
    assert [(r["message_id"], r["status"], r["error_code"]) for r in exported] == [
        (world["failed"], "failed", "131026")
    ]
    assert exported[0]["phone_number"] == MAGIC_UNDELIVERABLE
    assert exported[0]["external_error"].startswith("131026:") and exported[0]["cost"] == "0"
    expect(page.locator(f'tr[data-message-id="{world["failed"]}"]')).to_contain_text("Message undeliverable")

    page.goto(f"{gateway.url}/messages")
    page.get_by_label("Number").fill(world["number"].removeprefix("+"))
    page.get_by_label("Channel").select_option(value=str(gateway.ids["main"]))
    page.get_by_role("button", name="Filter").click()
    mine = rows_of(page)
    assert [r for r, _ in mine] == list(reversed(world["main"][:3]))
    assert [(r["message_id"], r["phone_number"], r["channel"]) for r in download(page)] == [
        (r, world["number"], "Main") for r, _ in mine
    ]
    # The number filter keeps the chart to that number: no failure there.
    expect(page.locator("[data-chart]")).to_contain_text("No failures in this period")

    page.goto(f"{gateway.url}/messages?error_code=131026")
    assert rows_of(page) == [(world["failed"], "failed")]
    page.goto(f"{gateway.url}/messages?channel={gateway.ids['second']}")
    assert [r for r, _ in rows_of(page)] == [world["second"]]


def test_an_agent_sees_only_the_inboxes_of_their_own(
    page: Page, gateway: Gateway, world: dict[str, Any]
) -> None:
    sign_in(page, gateway, "outsider@acme.test", "pw-out")  # the Second inbox only
    page.goto(f"{gateway.url}/messages")
    assert [r for r, _ in rows_of(page)] == [world["second"]]
    expect(page.locator("[data-chart]")).to_contain_text("No failures in this period")
    assert [r["message_id"] for r in download(page)] == [world["second"]]
    options = page.get_by_label("Channel").locator("option").all_text_contents()
    assert options[0] == "All channels" and len(options) == 2 and options[1].startswith("Second")


def test_filters_by_template_and_dates(gateway: Gateway, world: dict[str, Any]) -> None:
    today = datetime.now(UTC).date()
    with signed_in(gateway) as client:
        everything = {m for m, _ in ROW.findall(client.get("/messages").text)}
        by_template = client.get("/messages?template=otp_code").text
        assert {m for m, _ in ROW.findall(by_template)} == everything
        assert "No message matches these filters" in client.get("/messages?template=welcome").text
        dated = client.get(f"/messages?from={today - timedelta(days=1)}&to={today}").text
        assert {m for m, _ in ROW.findall(dated)} == everything
        tomorrow = client.get(f"/messages?from={today + timedelta(days=1)}").text
        assert ROW.findall(tomorrow) == []
        yesterday = client.get(f"/messages?to={today - timedelta(days=1)}").text
        assert ROW.findall(yesterday) == []


def test_refusals_are_pages(gateway: Gateway, world: dict[str, Any]) -> None:
    with signed_in(gateway) as client:
        for query, words in [
            ("number=12345", "Number: not a valid phone number"),
            ("status=queued", "Status: must be sent, delivered, read or failed"),
            ("error_code=abc", "Error code: must be Meta"),
            ("from=2026-02-30", "From: must be a date"),
            ("from=2026-11-25&to=2026-11-20", "To: must be later than"),
            ("before=msg_nothing", "Older: not the id of a message of this list"),
        ]:
            page = client.get(f"/messages?{query}")
            assert page.status_code == 422, query
            assert words in page.text.replace("&#39;", "'"), (query, page.text[-2000:])
            assert 'role="alert"' in page.text
    # Another inbox by id: refused as everywhere; signed out: the sign-in form.
    with signed_in(gateway, "agent@acme.test", "pw-agent") as agent:
        assert agent.get(f"/messages?channel={gateway.ids['second']}").status_code == 403
        assert agent.get(f"/messages.csv?channel={gateway.ids['second']}").status_code == 403
    with httpx.Client(base_url=gateway.url) as anonymous:
        assert anonymous.get("/messages").status_code == 303
        assert anonymous.get("/messages.csv").status_code == 303


def test_the_csv_is_safe_to_open_in_a_spreadsheet(gateway: Gateway, world: dict[str, Any]) -> None:
    """An agent's reply that looks like a formula is written so that a spreadsheet shows it as text."""
    customer = new_number()
    gateway.sim.inbound(MAIN["phone_number_id"], customer, "hi")
    with signed_in(gateway) as client:
        listing = wait_for(
            lambda: re.search(
                r'data-conversation-id="(\d+)"', client.get(f"/conversations?q={customer[-7:]}").text
            ),
            what="the customer's conversation",
        )
        conversation = listing.group(1)
        csrf = re.search(
            r'name="csrf_token" value="([^"]+)"', client.get(f"/conversations/{conversation}").text
        )
        assert csrf is not None
        text = '=HYPERLINK("http://evil.example","x")'
        sent = client.post(
            f"/conversations/{conversation}/reply", data={"text": text, "csrf_token": csrf.group(1)}
        )
        assert sent.status_code == 303
        exported = client.get(f"/messages.csv?number={customer}")
        assert exported.status_code == 200
        assert exported.headers["content-type"].startswith("text/csv")
        assert "attachment" in exported.headers["content-disposition"]
        rows = csv_rows(exported.text)
    assert [(r["sent_by"], r["text"], r["phone_number"]) for r in rows] == [("Agent", "'" + text, customer)]
