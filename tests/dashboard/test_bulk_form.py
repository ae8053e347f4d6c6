"""The bulk send form on a busy day (issue 46, points 4 and 5), in Chromium on both databases: the form
follows the inbox chosen in its own select (template list, sender number) and the batch leaves from that
inbox, with or without JavaScript; the preview names inbox, number, template, language, count and cost,
and offers Send only when something would go; files separated by semicolons, tabs or commas are read,
their problems named by line in words, bad rows skipped on request, and repeated numbers sent once."""

from __future__ import annotations

import codecs
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from test_dashboard_conversations import LIVE, sign_in

from support.harness import MAIN, SECOND, Gateway, marketing_preference, new_number, wait_for

ONLY_IN_SECOND = "filler_030"  # paused in Main's WABA for these tests: only Second's list has it


def listed_status(gateway: Gateway, channel: str, name: str) -> str | None:
    found = gateway.http.get(
        gateway.v1("/whatsapp/templates"),
        params={"channel_id": gateway.ids[channel], "name": name},
        headers=gateway.headers(),
    ).json()["data"]
    return found[0]["status"] if found else None


def meta_sets_status(gateway: Gateway, waba_id: str, name: str, status: str) -> None:
    answer = gateway.sim.http.post(
        f"{gateway.sim.url}/_sim/templates/{waba_id}/status",
        json={"name": name, "language": "en", "status": status},
    )
    assert answer.status_code == 200, answer.text
    wait_for(lambda: listed_status(gateway, "main", name) == status, what=f"{name} {status} in Main")


@pytest.fixture
def paused_in_main(gateway: Gateway) -> Iterator[None]:
    """Main and Second are two WABAs with the same seeded templates: Meta pauses one of Main's, so
    that the two inboxes' template lists differ."""
    meta_sets_status(gateway, MAIN["waba_id"], ONLY_IN_SECOND, "PAUSED")
    try:
        yield
    finally:
        meta_sets_status(gateway, MAIN["waba_id"], ONLY_IN_SECOND, "APPROVED")


def batch_of(gateway: Gateway, page: Page) -> dict[str, Any]:
    expect(page).to_have_url(re.compile(r"/bulk/bat_"))
    batch_id = page.url.rsplit("/", 1)[1]
    answer = gateway.http.get(gateway.v1(f"/whatsapp/bulk_messages/{batch_id}"), headers=gateway.headers())
    assert answer.status_code == 200, answer.text
    report: dict[str, Any] = answer.json()
    return report


def test_choosing_an_inbox_changes_the_form_and_the_batch_leaves_from_it(
    page: Page, gateway: Gateway, paused_in_main: None
) -> None:
    first, second = new_number(), new_number()
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new")
    template = page.get_by_label("Template", exact=True)
    expect(page.locator("[data-sender]")).to_have_text("+" + MAIN["display_phone_number"])
    expect(template.locator(f'option[value="{ONLY_IN_SECOND}|en"]')).to_have_count(0)
    # Only the select: no other button is pressed.
    inbox = page.get_by_label("Inbox", exact=True)
    inbox.focus()
    inbox.select_option(label=f"Second (+{SECOND['display_phone_number']})")
    expect(page.locator("[data-sender]")).to_have_text("+" + SECOND["display_phone_number"])
    expect(template.locator(f'option[value="{ONLY_IN_SECOND}|en"]')).to_have_count(1)
    expect(inbox).to_be_focused()  # the swap leaves the focus where it was
    template.select_option(value=f"{ONLY_IN_SECOND}|en")
    page.get_by_label("Phone numbers").fill(f"{first}\n{second}\n")
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("[data-preview-inbox]")).to_have_text("Second")
    expect(page.locator("[data-preview-sender]")).to_have_text("+" + SECOND["display_phone_number"])
    expect(page.locator("[data-preview-template]")).to_contain_text(ONLY_IN_SECOND)
    expect(page.locator("[data-preview-language]")).to_have_text("en")
    expect(page.locator("[data-preview-count]")).to_contain_text("2 messages will be sent")
    expect(page.locator("[data-preview-cost]")).to_contain_text("0.072 AZN")  # two utility templates
    expect(page.locator("h1")).to_be_focused()
    page.get_by_role("button", name="Send batch").click()
    report = batch_of(gateway, page)
    assert report["channel_id"] == gateway.ids["second"]
    assert (report["template"]["name"], report["accepted"]) == (ONLY_IN_SECOND, 2)
    [sent] = wait_for(lambda: gateway.sim.messages(to=first.lstrip("+")), what="the send at Meta")
    assert sent.get("phone_number_id", SECOND["phone_number_id"]) == SECOND["phone_number_id"]


def test_without_javascript_the_inbox_posted_is_the_one_used(browser: Browser, gateway: Gateway) -> None:
    number = new_number()
    context = browser.new_context(java_script_enabled=False, viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        sign_in(page, gateway)
        page.goto(f"{gateway.url}/bulk/new?inbox={gateway.ids['main']}")
        expect(page.locator("[data-sender]")).to_have_text("+" + MAIN["display_phone_number"])
        # The select changes, the part below cannot follow without a script: the preview still
        # takes the inbox posted, never the one of the address.
        page.get_by_label("Inbox", exact=True).select_option(value=str(gateway.ids["second"]))
        page.get_by_label("Template", exact=True).select_option(value="order_update|en")
        page.get_by_label("Phone numbers").fill(f"phone_number,1,2\n{number},A-1,shipped\n")
        page.get_by_role("button", name="Preview").click()
        expect(page.locator("[data-preview-inbox]")).to_have_text("Second")
        expect(page.locator("[data-preview-sender]")).to_have_text("+" + SECOND["display_phone_number"])
        # "Change the batch" and the button that shows the chosen inbox's templates keep what was typed.
        page.get_by_role("button", name="Change the batch").click()
        expect(page.locator("[data-sender]")).to_have_text("+" + SECOND["display_phone_number"])
        expect(page.get_by_label("Phone numbers")).to_have_value(f"phone_number,1,2\n{number},A-1,shipped\n")
        page.get_by_label("Inbox", exact=True).select_option(value=str(gateway.ids["main"]))
        page.get_by_role("button", name="Show this inbox's templates").click()
        expect(page.locator("[data-sender]")).to_have_text("+" + MAIN["display_phone_number"])
        page.get_by_role("button", name="Preview").click()
        expect(page.locator("[data-preview-sender]")).to_have_text("+" + MAIN["display_phone_number"])
        page.get_by_role("button", name="Send batch").click()
        assert batch_of(gateway, page)["channel_id"] == gateway.ids["main"]
    finally:
        context.close()


def test_a_template_of_another_inbox_is_refused_in_words(
    page: Page, gateway: Gateway, paused_in_main: None
) -> None:
    """A stale form (Second's template posted with Main's inbox) is refused, never sent from Main."""
    number = new_number()
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new?inbox={gateway.ids['second']}")
    page.get_by_label("Template", exact=True).select_option(value=f"{ONLY_IN_SECOND}|en")
    page.get_by_label("Phone numbers").fill(number)
    # The select's value changed without the swap (as a page without a script would post it).
    page.locator("#inbox-pick").evaluate(f"(el) => {{ el.value = '{gateway.ids['main']}'; }}")
    page.get_by_role("button", name="Preview").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text(f"Choose one of the templates of Main (+{MAIN['display_phone_number']})")
    expect(alert).to_contain_text(f"{ONLY_IN_SECOND} (en) is not one of its approved templates")
    expect(alert).to_be_focused()


def test_the_preview_offers_no_send_when_nothing_would_go(page: Page, gateway: Gateway) -> None:
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new")
    page.get_by_label("Template", exact=True).select_option(value="filler_001|en")
    page.get_by_label("Phone numbers").fill("not-a-number\n12\n")
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("[data-preview-count]")).to_contain_text("0 messages will be sent")
    expect(page.locator("[data-preview-cost]")).to_contain_text("0 AZN")
    expect(page.locator("[data-preview-inbox]")).to_have_text("Main")
    expect(page.locator("[data-preview-nothing]")).to_be_visible()
    expect(page.get_by_role("button", name="Send batch")).to_have_count(0)
    rejected = page.locator("[data-preview-rejected]")
    expect(rejected).to_contain_text("Line 1: not-a-number — not a phone number")
    expect(rejected).to_contain_text("Line 2: 12 — not a phone number")
    expect(page.locator("main")).not_to_contain_text("invalid_phone_number")


# Names as customers here write them, one with the comma Excel leaves unquoted in a semicolon file.
NAMES = ["Şəhla Məmmədova", "Елена Иванова", "Müller, Anna"]


@pytest.mark.parametrize(("delimiter", "words"), [(";", "semicolons"), ("\t", "tabs"), (",", "commas")])
def test_files_separated_by_semicolons_tabs_or_commas_are_read(
    page: Page, gateway: Gateway, tmp_path: Path, delimiter: str, words: str
) -> None:
    numbers = [new_number() for _ in NAMES]
    rows = [delimiter.join(["phone_number", "first_name", "order_id"])]
    for number, name, order in zip(numbers, NAMES, ["A-1", "A-2", "A-3"], strict=True):
        quoted = f'"{name}"' if delimiter in name else name  # as Excel quotes a value holding the separator
        rows.append(delimiter.join([number, quoted, order]))
    upload = tmp_path / "customers.csv"
    upload.write_bytes(codecs.BOM_UTF8 + "\r\n".join(rows).encode() + b"\r\n")  # Excel's "CSV UTF-8"
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new")
    page.get_by_label("Template", exact=True).select_option(value="welcome_named|en")
    page.get_by_label("CSV file").set_input_files(str(upload))
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("[data-preview-count]")).to_contain_text("3 messages will be sent")
    expect(page.locator("[data-preview-columns]")).to_have_text(
        f"Columns: phone_number, first_name, order_id (separated by {words})"
    )
    expect(page.locator("[data-preview-message]")).to_contain_text(f"Hi {NAMES[0]}, your order A-1 is ready")
    if delimiter == ";":  # one of them sent: every letter reaches Meta
        page.get_by_role("button", name="Send batch").click()
        expect(page.locator(".batch-head")).to_have_attribute("data-status", "completed", timeout=LIVE)
        for number, name in zip(numbers, NAMES, strict=True):
            [sent] = wait_for(lambda n=number: gateway.sim.messages(to=n.lstrip("+")), what="the send")
            parameters = sent["body"]["template"]["components"][0]["parameters"]
            assert {"type": "text", "text": name, "parameter_name": "first_name"} in parameters


def test_a_short_row_is_named_by_its_line_and_the_bad_rows_can_be_skipped(
    page: Page, gateway: Gateway
) -> None:
    good, short, also_good = new_number(), new_number(), new_number()
    text = (
        "phone_number;1;2\n"
        f"{good};A-1;shipped\n"
        "\n"  # a blank line still counts
        f"{short};A-2\n"
        f"{also_good};A-3;packed\n"
        ";A-4;lost\n"
    )
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new")
    page.get_by_label("Template", exact=True).select_option(value="order_update|en")
    page.get_by_label("Phone numbers").fill(text)
    page.get_by_role("button", name="Preview").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("2 lines of the list cannot be sent")
    expect(alert).to_contain_text("Line 4: 1 value for the template's 2 variables (none for 2)")
    expect(alert).to_contain_text("Line 6: no phone number")
    expect(alert).to_be_focused()
    expect(page.locator("main")).not_to_contain_text("recipients[")
    expect(page.get_by_label("Phone numbers")).to_have_value(text)  # kept, to correct a line
    page.get_by_label("Skip the bad rows").check()
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("[data-preview-count]")).to_contain_text("2 messages will be sent")
    skipped = page.locator("[data-preview-skipped]")
    expect(skipped).to_contain_text("Line 4: 1 value for the template's 2 variables")
    expect(skipped).to_contain_text("Line 6: no phone number")
    page.get_by_role("button", name="Send batch").click()
    report = batch_of(gateway, page)
    assert sorted(r["phone_number"] for r in report["recipients"]) == sorted([good, also_good])
    wait_for(lambda: gateway.sim.messages(to=also_good.lstrip("+")), what="the good rows at Meta")
    assert gateway.sim.messages(to=short.lstrip("+")) == []


def test_a_value_the_service_refuses_is_named_by_its_line(page: Page, gateway: Gateway) -> None:
    """The service's own per-recipient refusal (`recipients[1].parameters`) is said as the file's line."""
    first, second = new_number(), new_number()
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new")
    page.get_by_label("Template", exact=True).select_option(value="order_update|en")
    page.get_by_label("Phone numbers").fill(
        f"phone_number,1,2\n{first},A-1,shipped\n{second},{'x' * 1100},packed\n"
    )
    page.get_by_role("button", name="Preview").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("Line 3: value for 1 is longer than")
    expect(page.locator("main")).not_to_contain_text("recipients[")
    page.get_by_label("Skip the bad rows").check()
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("[data-preview-count]")).to_contain_text("1 messages will be sent")
    expect(page.locator("[data-preview-skipped]")).to_contain_text("Line 3: value for 1 is longer than")


def test_repeated_numbers_are_reported_and_sent_once(page: Page, gateway: Gateway) -> None:
    once, other = new_number(), new_number()
    spaced = f"{once[:4]} {once[4:6]} {once[6:9]} {once[9:]}"  # the same number as people type it
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new")
    page.get_by_label("Template", exact=True).select_option(value="order_update|en")
    page.get_by_label("Phone numbers").fill(
        f"phone_number,1,2\n{once},A-1,shipped\n{other},A-2,packed\n{spaced},A-3,lost\nnot-a-number,A-4,lost\n"
    )
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("[data-preview-count]")).to_contain_text("2 messages will be sent")
    expect(page.locator("[data-preview-repeats]")).to_contain_text(
        f"Line 4 repeats {once} from line 2; sent once"
    )
    page.get_by_role("button", name="Send batch").click()
    report = batch_of(gateway, page)
    assert (report["total"], report["accepted"]) == (3, 2)  # the repeat is no recipient of its own
    expect(page.locator(".batch-head")).to_have_attribute("data-status", "completed", timeout=LIVE)
    # The batch page says why a recipient was rejected in the preview's words, not the API's code.
    expect(page.locator('tr[data-status="rejected"]')).to_contain_text("Not a phone number")
    expect(page.locator("main")).not_to_contain_text("invalid_phone_number")
    assert len(gateway.sim.messages(to=once.lstrip("+"))) == 1


def test_the_send_checks_again_and_refuses_a_batch_that_changed_since_its_preview(
    page: Page, gateway: Gateway
) -> None:
    """A preview is not trusted: a customer who stops marketing messages after it changes the count,
    and the send says so instead of sending another batch than the one shown."""
    staying, leaving = new_number(), new_number()
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new")
    page.get_by_label("Template", exact=True).select_option(value="spring_sale|en")
    values = page.locator("fieldset:not([hidden])")
    values.get_by_label("Header {{1}}").fill("20% off")
    values.get_by_label("Body {{1}}").fill("20%")
    values.get_by_label("Button 1").fill("spring")
    page.get_by_label("Phone numbers").fill(f"{staying}\n{leaving}\n")
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("[data-preview-count]")).to_contain_text("2 messages will be sent")
    marketing_preference(gateway, leaving, "stop", int(time.time()))
    page.get_by_role("button", name="Send batch").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("The batch changed since its preview: 1 messages would go now, not 2")
    expect(page).to_have_url(re.compile(r"/bulk$"))
    assert gateway.sim.messages(to=staying.lstrip("+")) == []
    page.get_by_role("button", name="Preview").click()  # the form kept everything: preview again
    expect(page.locator("[data-preview-rejected]")).to_contain_text(
        f"Line 2: {leaving} — stopped marketing messages from this business"
    )
    page.get_by_role("button", name="Send batch").click()
    report = batch_of(gateway, page)
    assert (report["accepted"], report["rejected"]) == (1, 1)
