"""Bulk sends in the dashboard (issue 12, point 3), in a real browser on both databases: a batch from a
pasted CSV previewed (count, cost, first message) and sent through the API's own service, its page
following it live to `completed`; a batch from an uploaded file; agents kept out of the form."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect
from test_dashboard_conversations import LIVE, sign_in

from support.harness import Gateway, new_number


def test_a_pasted_csv_is_previewed_then_sent_and_completes_live(page: Page, gateway: Gateway) -> None:
    first, second = new_number(), new_number()
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk")
    page.get_by_role("link", name="New bulk send").click()
    page.get_by_label("Template", exact=True).select_option(value="order_update|en")
    page.get_by_label("Phone numbers").fill(
        f"phone_number,1,2\n{first},A-1,shipped\n{second},A-2,packed\nnot-a-number,A-3,lost\n"
    )
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("[data-preview-count]")).to_contain_text("2 messages will be sent")
    expect(page.locator("[data-preview-count]")).to_contain_text("1 recipients are rejected")
    expect(page.locator("[data-preview-cost]")).to_contain_text("0.072 AZN")  # two utility templates
    expect(page.locator("[data-preview-message]")).to_contain_text("A-1")
    assert gateway.sim.messages(to=first.lstrip("+")) == []  # a preview sends nothing
    page.get_by_role("button", name="Send batch").click()
    expect(page).to_have_url(re.compile(r"/bulk/bat_"))
    batch_id = page.url.rsplit("/", 1)[1]
    head = page.locator(".batch-head")
    expect(head).to_have_attribute("data-status", "completed", timeout=LIVE)
    expect(page.locator('[data-count="rejected"]')).to_have_text("1")
    # The API reports the same batch.
    report = gateway.http.get(
        gateway.v1(f"/whatsapp/bulk_messages/{batch_id}"), headers=gateway.headers()
    ).json()
    assert (report["accepted"], report["rejected"]) == (2, 1)
    bodies = [m["body"] for m in gateway.sim.messages(to=first.lstrip("+"))]
    assert bodies and bodies[0]["template"]["name"] == "order_update"
    page.goto(f"{gateway.url}/bulk")
    expect(page.locator(f'[data-batch-id="{batch_id}"]')).to_contain_text("order_update")


def test_an_uploaded_csv_file_is_sent(page: Page, gateway: Gateway, tmp_path: Path) -> None:
    numbers = [new_number() for _ in range(3)]
    upload = tmp_path / "customers.csv"
    upload.write_text("phone_number\n" + "\n".join(numbers) + "\n")
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new")
    page.get_by_label("Template", exact=True).select_option(value="otp_code|en")
    page.locator("fieldset:not([hidden])").get_by_label("Body {{1}}").fill("424242")
    page.get_by_label("CSV file").set_input_files(str(upload))
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("[data-preview-count]")).to_contain_text("3 messages will be sent")
    expect(page.locator("[data-preview-message]")).to_contain_text("424242")
    page.get_by_role("button", name="Send batch").click()
    expect(page.locator(".batch-head")).to_have_attribute("data-status", "completed", timeout=LIVE)
    for number in numbers:
        assert gateway.sim.messages(to=number.lstrip("+"))


def test_a_refused_batch_says_why_and_agents_cannot_send(page: Page, gateway: Gateway) -> None:
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new")
    page.get_by_label("Template", exact=True).select_option(value="order_update|en")
    page.get_by_label("Phone numbers").fill(f"phone_number,1,colour\n{new_number()},A-1,red\n")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_role("alert")).to_contain_text("colour")
    page.get_by_role("button", name="Sign out").click()
    sign_in(page, gateway, "agent@acme.test", "pw-agent")
    answer = page.goto(f"{gateway.url}/bulk/new")
    assert answer is not None and answer.status == 403
    expect(page.get_by_role("link", name="Bulk")).to_have_count(0)
