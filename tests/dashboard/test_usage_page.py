"""`/usage` (API.md section 12, issue 12 points 5 and 7), both databases: the chart (server-drawn SVG in
`data-chart`), the table, the channel filter and date range, and `Download CSV`, which must be exactly
the API's CSV. In Chromium, and over HTTP for the agents' scope and the refusals."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect
from test_conversation_list import signed_in
from test_dashboard_conversations import sign_in

from support.app_in_thread import sql
from support.harness import ADMIN_TOKEN, AGENT_TOKEN, Gateway, new_number, wait_for

SALE = {"name": "spring_sale", "language": "en", "parameters": ["20%", "20%", "spring"]}
OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
UNDELIVERABLE = "+994500001026"
HEADER = "date,channel_id,category,messages,failed,amount"


@pytest.fixture(scope="module")
def traffic(gateway: Gateway) -> list[str]:
    sends = [
        gateway.otp(new_number()),
        gateway.otp(UNDELIVERABLE),
        gateway.send({"phone_number": new_number(), "template": SALE}),
        gateway.send({"channel_id": gateway.ids["second"], "phone_number": new_number(), "template": OTP}),
    ]
    ids = [response.json()["id"] for response in sends]
    for message_id in ids:
        wait_for(partial(settled, gateway, message_id), what="the sends to settle")
    return ids


def settled(gateway: Gateway, message_id: str) -> bool:
    """Meta's statuses (and their pricing) arrived."""
    return gateway.message(message_id)["status"] in ("delivered", "read", "failed")


def set_created_at(gateway: Gateway, message_id: str, at: datetime) -> None:
    """Move a message in time, as if it had been sent then (as tests/usage/test_usage_api.py does)."""
    if gateway.database_url.startswith("sqlite"):
        stored = at.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
        sql(
            gateway.database_url,
            "UPDATE messages SET created_at = :at WHERE id = :id",
            at=stored,
            id=message_id,
        )
    else:
        statement = "UPDATE messages SET created_at = CAST(:at AS TIMESTAMP WITH TIME ZONE) WHERE id = :id"
        sql(gateway.database_url, statement, at=at.isoformat(), id=message_id)


def api_csv(gateway: Gateway, token: str = ADMIN_TOKEN, **params: str | int) -> str:
    query = {key.rstrip("_"): value for key, value in params.items()}
    response = gateway.http.get(
        gateway.v1("/usage"), params=query, headers=gateway.headers(token, Accept="text/csv")
    )
    assert response.status_code == 200, response.text
    return response.text


def downloaded(page: Page) -> str:
    with page.expect_download() as info:
        page.get_by_role("link", name="Download CSV").click()
    path = info.value.path()
    return Path(path).read_bytes().decode()


def test_the_page_charts_tabulates_and_downloads_the_apis_csv(
    page: Page, gateway: Gateway, traffic: list[str]
) -> None:
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/usage")
    chart = page.locator("[data-chart] svg[data-size=wide]")
    expect(chart).to_be_visible()
    expect(page.locator("[data-chart] svg[data-size=narrow]")).to_be_hidden()  # the phone's drawing
    # Stacked segments of both panels (messages and cost) for each category sent today.
    for category in ("AUTHENTICATION", "MARKETING"):
        expect(chart.locator(f"rect.cat-{category}")).to_have_count(2)
    expect(chart.locator("rect.cat-MARKETING").first.locator("title")).to_contain_text("Marketing: 1 message")
    rows = page.locator("table.usage-table tbody tr")
    expect(rows).to_have_count(3)  # Main AUTHENTICATION and MARKETING, Second AUTHENTICATION
    expect(page.locator("[data-total=messages]")).to_have_text("4")
    expect(page.locator("[data-total=failed]")).to_have_text("1")
    expect(page.locator("[data-total=amount]")).to_have_text("0.237 AZN")
    first, last = (
        page.get_by_label("From", exact=True).input_value(),
        page.get_by_label("To", exact=True).input_value(),
    )
    csv = downloaded(page)
    assert csv == api_csv(gateway, from_=first, to=last)
    assert csv.startswith(HEADER + "\r\n") and csv.count("\r\n") == 4

    # The channel filter and a date range, then the CSV of what is shown.
    page.get_by_label("Channel", exact=True).select_option(str(gateway.ids["second"]))
    page.get_by_label("From", exact=True).fill((datetime.now(UTC).date() - timedelta(days=6)).isoformat())
    page.get_by_role("button", name="Show").click()
    expect(page).to_have_url(re.compile(rf"channel_id={gateway.ids['second']}"))
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Second")
    first, last = (
        page.get_by_label("From", exact=True).input_value(),
        page.get_by_label("To", exact=True).input_value(),
    )
    assert csv != (only_second := downloaded(page))
    assert only_second == api_csv(gateway, from_=first, to=last, channel_id=gateway.ids["second"])

    # A range without messages: an empty state that says what to do, the chart without bars.
    page.get_by_label("From", exact=True).fill("2024-01-01")
    page.get_by_label("To", exact=True).fill("2024-01-31")
    page.get_by_role("button", name="Show").click()
    expect(page.locator(".empty")).to_contain_text("No messages were sent from 2024-01-01 to 2024-01-31")
    expect(chart.locator("rect")).to_have_count(0)
    assert downloaded(page) == HEADER + "\r\n"

    # On a phone, the narrow drawing of the same figures.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{gateway.url}/usage")
    narrow = page.locator("[data-chart] svg[data-size=narrow]")
    expect(narrow).to_be_visible()
    expect(chart).to_be_hidden()
    expect(narrow.locator("rect.cat-MARKETING")).to_have_count(2)


def test_agents_see_their_inboxes_only(gateway: Gateway, traffic: list[str]) -> None:
    main, second = gateway.ids["main"], gateway.ids["second"]
    with signed_in(gateway, "agent@acme.test", "pw-agent") as agent:
        page = agent.get("/usage")
        assert page.status_code == 200
        assert 'data-chart="usage"' in page.text
        assert f'<option value="{main}"' in page.text and f'<option value="{second}"' not in page.text
        assert page.text.count("data-usage-row") == 2  # Main's AUTHENTICATION and MARKETING
        assert "Second" not in page.text
        refused = agent.get(f"/usage?channel_id={second}")
        assert refused.status_code == 403 and "Not allowed" in refused.text
        assert agent.get(f"/usage/csv?channel_id={second}").status_code == 403
        today = datetime.now(UTC).date().isoformat()
        start = (datetime.now(UTC).date() - timedelta(days=29)).isoformat()
        exported = agent.get(f"/usage/csv?from={start}&to={today}")
        assert exported.headers["content-type"].startswith("text/csv")
        assert exported.headers["content-disposition"].startswith("attachment")
        assert exported.text == api_csv(gateway, AGENT_TOKEN, from_=start, to=today)
    with signed_in(gateway) as admin:
        page = admin.get("/usage")
        assert f'<option value="{second}"' in page.text and page.text.count("data-usage-row") == 3


def test_a_wrong_range_is_explained_and_signed_out_goes_to_sign_in(gateway: Gateway) -> None:
    with signed_in(gateway) as admin:
        wrong = admin.get("/usage?from=2026-02-01&to=2025-01-01")
        assert wrong.status_code == 422
        assert 'role="alert"' in wrong.text and "is after" in wrong.text
        assert 'name="from"' in wrong.text  # the form is there to fix it
        too_long = admin.get("/usage?from=2024-01-01&to=2025-12-31")
        assert too_long.status_code == 422 and "at most 366" in too_long.text
        assert admin.get("/usage?channel_id=nope").status_code == 422
        assert admin.get("/usage?channel_id=987654").status_code == 404
        assert admin.get("/usage/csv?from=someday").status_code == 422
    with httpx.Client(base_url=gateway.url) as anonymous:
        for path in ("/usage", "/usage/csv"):
            response = anonymous.get(path)
            assert response.status_code == 303 and response.headers["location"].startswith("/login")


def test_the_table_is_paged_and_the_totals_cover_the_whole_period(gateway: Gateway) -> None:
    """102 rows (51 days of 2025, two categories a day) make two pages of the table."""
    first = date(2025, 1, 1)
    order = {"name": "order_update", "language": "en", "parameters": ["A-1", "shipped"]}
    for offset in range(51):
        day = first + timedelta(days=offset)
        for template in (OTP, order):
            response = gateway.send({"phone_number": new_number(), "template": template})
            at = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
            set_created_at(gateway, response.json()["id"], at)
    last = first + timedelta(days=50)
    with signed_in(gateway) as admin:
        page_one = admin.get(f"/usage?from={first}&to={last}")
        assert page_one.text.count("data-usage-row") == 100
        assert "Rows 1\N{EN DASH}100 of 102" in page_one.text and "Page 1 of 2" in page_one.text
        assert '<strong data-total="messages">102</strong>' in page_one.text
        following = re.search(r'<a href="([^"]+)">Next rows</a>', page_one.text)
        assert following is not None
        page_two = admin.get(following.group(1).replace("&amp;", "&"))
        assert page_two.text.count("data-usage-row") == 2 and "Rows 101\N{EN DASH}102 of 102" in page_two.text
        assert (
            f'<td data-label="Date (UTC)">{last}</td>' in page_two.text and "Previous rows" in page_two.text
        )
        # The CSV has every row, whatever the page.
        assert admin.get(f"/usage/csv?from={first}&to={last}").text.count("\r\n") == 103
