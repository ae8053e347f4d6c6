"""Bulk pages under API.md's rules (issue 45, points 9 and 10), in a real browser on both databases:
only administrators see batches, and an uploaded CSV is read in the encoding it says it is in, or
refused naming the line, never sent with garbled names."""

from __future__ import annotations

import codecs
from pathlib import Path

from playwright.sync_api import Page, expect
from test_dashboard_conversations import LIVE, sign_in

from support.harness import Gateway, new_number, signed_in, wait_for


def test_agents_read_no_batch(page: Page, gateway: Gateway) -> None:
    number = new_number()
    body = {
        "channel_id": gateway.ids["main"],
        "template": {"name": "otp_code", "language": "en", "parameters": ["1"]},
        "phone_numbers": [number],
    }
    sent = gateway.http.post(gateway.v1("/whatsapp/bulk_messages"), json=body, headers=gateway.headers())
    assert sent.status_code == 202, sent.text
    batch_id = sent.json()["batch_id"]
    sign_in(page, gateway, "agent@acme.test", "pw-agent")
    for path in ("/bulk", f"/bulk/{batch_id}", "/bulk/new"):
        answer = page.goto(f"{gateway.url}{path}")
        assert answer is not None and answer.status == 403, path
        expect(page.locator("body")).not_to_contain_text(number)
    expect(page.get_by_role("link", name="Bulk")).to_have_count(0)
    # The same answer without a browser, and an administrator still reads it.
    with signed_in(gateway, "agent@acme.test", "pw-agent") as agent:
        assert agent.get(f"/bulk/{batch_id}").status_code == 403
    with signed_in(gateway) as admin:
        assert admin.get(f"/bulk/{batch_id}").status_code == 200


def upload(page: Page, gateway: Gateway, path: Path) -> None:
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/bulk/new")
    page.get_by_label("Template", exact=True).select_option(value="welcome_named|en")
    page.get_by_label("CSV file").set_input_files(str(path))
    page.get_by_role("button", name="Preview").click()


def test_a_windows_1252_csv_is_refused_naming_the_line(page: Page, gateway: Gateway, tmp_path: Path) -> None:
    first, second = new_number(), new_number()
    csv = tmp_path / "customers.csv"
    csv.write_bytes(
        f"phone_number,first_name,order_id\n{first},Anna,A-1\n{second},Müller,A-2\n".encode("cp1252")
    )
    upload(page, gateway, csv)
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("line 3 is not UTF-8 text")
    expect(alert).to_contain_text("CSV UTF-8")
    assert gateway.sim.messages(to=second.lstrip("+")) == []


def test_utf_8_and_utf_16_files_with_a_byte_order_mark_keep_every_letter(
    page: Page, gateway: Gateway, tmp_path: Path
) -> None:
    for encoding, mark in (("utf-8", codecs.BOM_UTF8), ("utf-16-le", codecs.BOM_UTF16_LE)):
        number = new_number()
        csv = tmp_path / f"customers-{encoding}.csv"
        csv.write_bytes(
            mark + f"phone_number,first_name,order_id\n{number},Müller Şəhla,A-7\n".encode(encoding)
        )
        upload(page, gateway, csv)
        expect(page.locator("[data-preview-count]")).to_contain_text("1 messages will be sent")
        expect(page.locator("[data-preview-message]")).to_contain_text("Müller Şəhla")
        page.get_by_role("button", name="Send batch").click()
        expect(page.locator(".batch-head")).to_have_attribute("data-status", "completed", timeout=LIVE)
        [request] = wait_for(lambda n=number: gateway.sim.messages(to=n.lstrip("+")), what="the send")
        parameters = request["body"]["template"]["components"][0]["parameters"]
        assert {"type": "text", "text": "Müller Şəhla", "parameter_name": "first_name"} in parameters
        page.get_by_role("button", name="Sign out").click()
