"""The conversation list on a busy day (issue 46, points 1 and 7; API.md section 12), in Chromium on both
databases: each row shows the last message and who wrote it, `Waiting` while the customer spoke last
and nobody answered (on every tab: an OTP resolves a conversation without answering it), the window's
state (`data-window`), the tabs' counts, "Needs reply", and a search that ignores case and diacritics
of Azerbaijani, Turkish and Russian names and finds words of the last message."""

# Names and messages are written here as customers write them: Azerbaijani has a dotless i.
# ruff: noqa: RUF001

from __future__ import annotations

import re
import secrets
import time

import pytest
from playwright.sync_api import Browser, BrowserContext, Cookie, Locator, Page, expect
from test_dashboard_conversations import LIVE, sign_in

from support.harness import Gateway, new_number, post_meta, signed_in, wait_for, webhook
from support.harness import change as meta_change

QUESTION = "Salam! Sifarişim #4411 hələ gəlməyib, cümə gününə qədər lazımdır. Kuryer nə vaxt gələcək?"


@pytest.fixture(scope="module")
def session_cookies(browser: Browser, gateway: Gateway) -> list[Cookie]:
    """Signed in once per database, through the sign-in form: each test's context starts with the
    session's cookies (the tests here are about the list, not the sign-in, which took a second each)."""
    context = browser.new_context()
    try:
        sign_in(context.new_page(), gateway)
        return context.cookies()
    finally:
        context.close()


@pytest.fixture(autouse=True)
def _signed_in(context: BrowserContext, session_cookies: list[Cookie]) -> None:
    context.add_cookies(session_cookies)  # type: ignore[arg-type]


def customer_writes(gateway: Gateway, number: str, text: str, *, name: str, hours_ago: float = 0) -> None:
    """A customer's message as Meta sends it, at Meta's time `hours_ago` (the window runs from it),
    and the conversation list showing it."""
    at = int(time.time() - hours_ago * 3600)
    message = {
        "from": number.lstrip("+"),
        "id": f"wamid.{secrets.token_hex(12)}",
        "timestamp": str(at),
        "type": "text",
        "text": {"body": text},
    }
    contact = {"wa_id": number.lstrip("+"), "profile": {"name": name}}
    body = webhook(meta_change({"contacts": [contact], "messages": [message]}))
    assert post_meta(gateway, body).status_code == 200
    with signed_in(gateway) as client:
        wait_for(
            lambda: text[:40] in client.get(f"/conversations?status=needs_reply&q={number[-7:]}").text,
            what=f"{number}'s message in the list",
        )


def row_of(page: Page, number: str) -> Locator:
    return page.locator("[data-conversation-id]").filter(has_text=number)


def test_waiting_lasts_until_a_reply_and_survives_an_otp_that_resolves(page: Page, gateway: Gateway) -> None:
    number = new_number()
    customer_writes(gateway, number, QUESTION, name="Aysel Məmmədova")
    page.goto(f"{gateway.url}/conversations")
    row = row_of(page, number)
    expect(row).to_have_count(1)
    expect(row).to_contain_text(QUESTION[:60])  # the last message's text, at least 60 characters
    expect(row.locator(".author")).to_have_text("Customer")
    expect(row).to_contain_text(re.compile(r"Waiting \d+ min"))
    expect(row).to_contain_text("Aysel Məmmədova")
    expect(row).to_have_attribute("data-window", "open")

    # An agent's reply from the dashboard ends the waiting, and the list names the agent.
    row.get_by_role("link").click()
    page.get_by_label("Reply").fill("Salam Aysel! Kuryer sabah saat 10-da gələcək.")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator(".message.outbound").last).to_contain_text("Kuryer sabah", timeout=LIVE)
    page.goto(f"{gateway.url}/conversations")
    row = row_of(page, number)
    expect(row.locator(".author")).to_have_text("Acme Admin")
    expect(row).to_contain_text("Salam Aysel! Kuryer sabah saat 10-da gələcək.")
    expect(row).not_to_contain_text("Waiting")
    page.goto(f"{gateway.url}/conversations?status=needs_reply")
    expect(row_of(page, number)).to_have_count(0)

    # The customer asks again; the company's system sends an OTP: the conversation is resolved, the
    # question is not answered. It waits on the Resolved tab and in "Needs reply".
    customer_writes(gateway, number, "Bəs kod niyə gəlmir? Məni eşidirsiniz?", name="Aysel Məmmədova")
    assert gateway.otp(number).status_code == 201
    with signed_in(gateway) as client:
        wait_for(
            lambda: number in client.get("/conversations?status=resolved").text, what="the OTP to resolve it"
        )
    page.goto(f"{gateway.url}/conversations?status=open")
    expect(row_of(page, number)).to_have_count(0)
    page.goto(f"{gateway.url}/conversations?status=resolved")
    row = row_of(page, number)
    expect(row).to_have_attribute("data-status", "resolved")
    expect(row.locator(".author")).to_have_text("API")
    # The template's body as the customer read it, named by its template, as the thread shows it.
    expect(row.locator(".last")).to_contain_text("otp_code: 123456 is your verification code.")
    expect(row).to_contain_text(re.compile(r"Waiting \d+ min"))
    page.get_by_role("link", name=re.compile(r"^Needs reply")).click()
    expect(page).to_have_url(re.compile(r"status=needs_reply"))
    expect(row_of(page, number)).to_contain_text("Waiting")


def test_a_free_form_api_message_answers_and_an_otp_alone_never_waits(page: Page, gateway: Gateway) -> None:
    answered, otp_only = new_number(), new_number()
    customer_writes(gateway, answered, "Is my order 5512 on its way?", name="Kamran")
    assert (
        gateway.send({"phone_number": answered, "text": "Yes: it left the warehouse at 9:40."}).status_code
        == 201
    )
    assert gateway.otp(otp_only).status_code == 201
    page.goto(f"{gateway.url}/conversations?status=resolved")
    row = row_of(page, answered)
    expect(row.locator(".author")).to_have_text("API")
    expect(row).to_contain_text("Yes: it left the warehouse at 9:40.")
    expect(row).not_to_contain_text("Waiting")
    lone = row_of(page, otp_only)
    expect(lone).to_contain_text("otp_code: 123456 is your verification code.")
    expect(lone).not_to_contain_text("Waiting")
    expect(lone).to_have_attribute("data-window", "closed")  # the customer never wrote


def test_window_state_on_each_row(page: Page, gateway: Gateway) -> None:
    fresh, closing, urgent, closed = (new_number() for _ in range(4))
    customer_writes(gateway, fresh, "Just now", name="Nərmin")
    customer_writes(gateway, closing, "Twenty-one hours ago", name="Rəşad", hours_ago=21)
    customer_writes(gateway, urgent, "Twenty-three and a half hours ago", name="Ülviyyə", hours_ago=23.5)
    customer_writes(gateway, closed, "Two days ago", name="Tural", hours_ago=48)
    page.goto(f"{gateway.url}/conversations?status=needs_reply")
    expect(row_of(page, fresh)).to_have_attribute("data-window", "open")
    expect(row_of(page, closing)).to_have_attribute("data-window", "closing")
    expect(row_of(page, closing)).not_to_have_attribute("data-urgent", "")
    expect(row_of(page, closing).locator(".window")).to_have_text(re.compile(r"^Window 2 h \d+ min left$"))
    expect(row_of(page, urgent)).to_have_attribute("data-window", "closing")
    expect(row_of(page, urgent)).to_have_attribute("data-urgent", "")
    expect(row_of(page, closed)).to_have_attribute("data-window", "closed")
    expect(row_of(page, closed)).to_contain_text("Window closed")
    expect(row_of(page, closed)).to_contain_text("Waiting 2 d")
    # Longest waiting first.
    order = [
        int(i)
        for i in page.locator("[data-conversation-id]").evaluate_all(
            "rows => rows.map(row => row.dataset.conversationId)"
        )
    ]
    ids = {n: int(row_of(page, n).get_attribute("data-conversation-id") or 0) for n in (closed, fresh)}
    assert order.index(ids[closed]) < order.index(ids[fresh])


def test_tab_counts_match_the_rows_listed(page: Page, gateway: Gateway) -> None:
    customer_writes(gateway, new_number(), "A question for the counts", name="Sayı")
    assert gateway.otp(new_number(), conversation_status="pending").status_code == 201
    assert gateway.otp(new_number()).status_code == 201
    for key in ("open", "pending", "resolved", "needs_reply"):
        page.goto(f"{gateway.url}/conversations?status={key}")
        rows = page.locator("[data-conversation-id]").count()
        assert rows < 50  # one page: the count is the rows shown
        count = page.locator(f"#count-{key}")
        expect(count).to_have_text(str(rows))
        assert rows > 0, key
    # The counts follow the live stream with the list: a customer who writes is counted at once.
    page.goto(f"{gateway.url}/conversations?status=open")
    before = int(page.locator("#count-open").inner_text())
    number = new_number()
    customer_writes(gateway, number, "A new question while the list is open", name="Canlı")
    expect(row_of(page, number)).to_have_count(1, timeout=LIVE)
    expect(page.locator("#count-open")).to_have_text(str(before + 1), timeout=LIVE)
    expect(page.locator("#conversation-list .tab-count")).to_have_count(0)  # swapped out of band


@pytest.mark.parametrize(
    ("name", "typed"),
    [
        ("Şəhla Əliyeva", "ŞƏHLA"),
        ("Şəhla Əliyeva", "sehla"),
        ("Elçin Qasımov", "elcin"),
        ("İlkin Işıqlı", "ILKIN ISIQLI"),
        ("Людмила Ёлкина", "ЛЮДМИЛА"),
        ("Людмила Ёлкина", "елкина"),
    ],
)
def test_search_ignores_case_and_diacritics(page: Page, gateway: Gateway, name: str, typed: str) -> None:
    number = gateway_customer(gateway, name)
    search(page, gateway, typed)
    expect(row_of(page, number)).to_have_count(1)
    expect(row_of(page, number)).to_contain_text(name)


def test_search_finds_a_word_of_the_last_message_and_a_number(page: Page, gateway: Gateway) -> None:
    number = new_number()
    customer_writes(gateway, number, "Bağlama KARGO7731 gecikir, zəmanət var?", name="Orxan")
    search(page, gateway, "kargo7731")
    expect(row_of(page, number)).to_have_count(1)
    search(page, gateway, "ZEMANET")
    expect(row_of(page, number)).to_have_count(1)
    search(page, gateway, number[-7:])
    expect(row_of(page, number)).to_have_count(1)
    search(page, gateway, "nobody-writes-this")
    expect(page.locator("[data-conversation-id]")).to_have_count(0)
    expect(page.locator("main")).to_contain_text("matches")


_customers: dict[str, str] = {}


def gateway_customer(gateway: Gateway, name: str) -> str:
    """One customer per name in this module's database (a search for a name then finds one row)."""
    key = f"{gateway.database_url}|{name}"
    if key not in _customers:
        number = new_number()
        customer_writes(gateway, number, f"Salam, mən {name.split()[0]}.", name=name)
        _customers[key] = number
    return _customers[key]


def search(page: Page, gateway: Gateway, typed: str) -> None:
    """Type in the `Search` input and press Enter, as an agent does (on "Needs reply": every status)."""
    page.goto(f"{gateway.url}/conversations?status=needs_reply")
    box = page.get_by_label("Search")
    box.fill(typed)
    # The search's address, not htmx's own history entry after a live refresh (also a navigation).
    with page.expect_navigation(url=re.compile(r"[?&]q=")):
        box.press("Enter")
    expect(page.get_by_label("Search")).to_have_value(typed)
