"""Media header templates from the dashboard (API.md section 14), in a real browser on both databases:
the reply box's template picker and the bulk form take the header's link (and a document's file name),
and what reaches Meta is the document header of Meta's documented shape."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect
from test_dashboard_conversations import LIVE, sign_in

from support.harness import Gateway, new_number, wait_for

LINK = "https://93.184.215.14/invoices/1001.pdf"  # a public address literal: no DNS, nothing fetched


def document_of(gateway: Gateway, number: str) -> dict[str, str]:
    [request] = wait_for(lambda: gateway.sim.messages(to=number.lstrip("+")), what="the invoice at Meta")
    header = request["body"]["template"]["components"][0]
    assert header["type"] == "header"
    document: dict[str, str] = header["parameters"][0]["document"]
    return document


def test_the_reply_box_sends_a_document_template(page: Page, gateway: Gateway) -> None:
    number = new_number()
    # An API send makes the conversation; the customer never wrote, so the window is closed.
    first = gateway.send(
        {
            "phone_number": number,
            "template": {"name": "order_update", "language": "en", "parameters": ["A-1", "shipped"]},
        }
    )
    assert first.status_code == 201, first.text
    conversation_id = gateway.message(first.json()["id"])["conversation"]["id"]
    wait_for(lambda: gateway.sim.messages(to=number.lstrip("+")), what="the first send")
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/conversations/{conversation_id}")
    page.get_by_label("Template", exact=True).select_option(value="invoice_ready|en")
    values = page.locator("fieldset:not([hidden])")
    values.get_by_label("Header document: link (https)").fill(LINK)
    values.get_by_label("Document's file name (optional)").fill("invoice-1001.pdf")
    values.get_by_label("Body {{1}}").fill("A-1001")
    page.get_by_role("button", name="Send template").click()
    requests = wait_for(
        lambda: len(sent := gateway.sim.messages(to=number.lstrip("+"))) >= 2 and sent, what="the invoice"
    )
    header = requests[-1]["body"]["template"]["components"][0]
    assert header == {
        "type": "header",
        "parameters": [{"type": "document", "document": {"link": LINK, "filename": "invoice-1001.pdf"}}],
    }
    # The thread shows the document by its file name.
    expect(page.locator("[data-message-id]").last).to_contain_text("invoice-1001.pdf", timeout=LIVE)


def test_a_private_link_is_refused_in_words(page: Page, gateway: Gateway) -> None:
    number = new_number()
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new")
    page.get_by_label("Template", exact=True).select_option(value="invoice_ready|en")
    values = page.locator("fieldset:not([hidden])")
    values.get_by_label("Header document: link (https)").fill("https://10.0.0.5/invoice.pdf")
    values.get_by_label("Body {{1}}").fill("A-1")
    page.get_by_label("Phone numbers").fill(number)
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("body")).to_contain_text("public address")
    assert gateway.sim.messages(to=number.lstrip("+")) == []


def test_a_bulk_csv_gives_each_recipient_its_own_document(page: Page, gateway: Gateway) -> None:
    first, second = new_number(), new_number()
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new")
    page.get_by_label("Template", exact=True).select_option(value="invoice_ready|en")
    page.get_by_label("Phone numbers").fill(
        "phone_number,header,header_filename,1\n"
        f"{first},{LINK}?n=1,invoice-1.pdf,A-1\n"
        f"{second},{LINK}?n=2,invoice-2.pdf,A-2\n"
    )
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("[data-preview-count]")).to_contain_text("2 messages will be sent")
    expect(page.locator("[data-preview-message]")).to_contain_text("invoice-1.pdf")
    page.get_by_role("button", name="Send batch").click()
    expect(page).to_have_url(re.compile(r"/bulk/bat_"))
    assert document_of(gateway, first) == {"link": f"{LINK}?n=1", "filename": "invoice-1.pdf"}
    assert document_of(gateway, second) == {"link": f"{LINK}?n=2", "filename": "invoice-2.pdf"}
