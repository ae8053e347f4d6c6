"""Every filter form works when submitted as a person does, with its defaults (issue 46, point 0): a field
left at "All inboxes" or an empty search is sent as `inbox=` or `q=`, which the pages once refused
("This page's address is not valid"). In Chromium on both databases: each form is submitted by its own
button, and the search by Enter, never by a URL built by hand."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect
from test_dashboard_conversations import sign_in

from support.harness import MAIN, Gateway, new_number, signed_in, wait_for

NOT_VALID = "address is not valid"


def sent_to(path: str) -> re.Pattern[str]:
    """The address a GET form sends to: waited for by it, since htmx's own history entry (its
    `replaceState` after a live refresh of the list) is a navigation without a response too."""
    return re.compile(re.escape(path) + r"\?")


# Each page with a filter form (GET), and the name of the button that submits it.
FORMS = [
    ("/conversations", "Filter"),
    ("/messages", "Filter"),
    ("/usage", "Show"),
    # /bulk/new has none since its inbox became a field of the send form (test_bulk_form.py).
    ("/settings/audit", "Filter"),
    ("/settings/templates", "Filter"),
]


def test_every_filter_form_submitted_with_its_defaults_shows_its_page(page: Page, gateway: Gateway) -> None:
    sign_in(page, gateway)
    for path, button in FORMS:
        page.goto(f"{gateway.url}{path}")
        with page.expect_navigation(url=sent_to(path)) as submitted:
            page.locator("main form[method=get]").get_by_role("button", name=button).click()
        answer = submitted.value
        assert answer is not None and answer.status == 200, f"{path}: {answer.status if answer else None}"
        expect(page.locator("body")).not_to_contain_text(NOT_VALID)
        assert re.search(re.escape(path) + r"\?", page.url), page.url  # the form was really sent


def test_a_name_typed_in_search_and_enter_finds_the_conversation(page: Page, gateway: Gateway) -> None:
    number = new_number()
    name = f"Searchable {number[-4:]}"
    gateway.sim.inbound(MAIN["phone_number_id"], number, "hello", name=name)
    with signed_in(gateway) as client:
        wait_for(lambda: name in client.get(f"/conversations?q={number[-7:]}").text, what="the conversation")
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/conversations")
    search = page.get_by_label("Search")
    search.fill(name)
    with page.expect_navigation(url=sent_to("/conversations")) as submitted:
        search.press("Enter")
    answer = submitted.value
    assert answer is not None and answer.status == 200
    expect(page.locator("body")).not_to_contain_text(NOT_VALID)
    expect(page.locator("main")).to_contain_text(name)
