"""Settings > Templates after Meta's template webhooks (API.md section 14), in the browser: each template's
status, category with a recategorisation Meta announced, quality and Meta's reason; paused, disabled and
RED templates are marked in words, and nothing scrolls sideways at 390 px."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect
from test_settings_access import sign_in

from support.harness import MAIN, Gateway, post_meta, wait_for

PAUSE = "Your WhatsApp message template has been paused for 3 hours because it had issues."
# WAGATE_SCREENSHOTS=dir keeps the page's pictures at both widths (to look at, or for docs/).
SHOTS = os.environ.get("WAGATE_SCREENSHOTS")


def meta_says(gateway: Gateway, *changes: tuple[str, dict[str, Any]]) -> None:
    """Meta's template webhooks for Main's WhatsApp Business Account, as Meta posts them."""
    body = {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": MAIN["waba_id"],
                "time": 1795500000,
                "changes": [
                    {"field": field, "value": {"message_template_language": "en", **value}}
                    for field, value in changes
                ],
            }
        ],
    }
    assert post_meta(gateway, body).status_code == 200


def test_the_templates_page_shows_and_marks_what_meta_said(page: Page, gateway: Gateway) -> None:
    meta_says(
        gateway,
        (
            "message_template_status_update",
            {
                "event": "PAUSED",
                "message_template_name": "filler_001",
                "reason": "NONE",
                "other_info": {"title": "FIRST_PAUSE", "description": PAUSE},
            },
        ),
        (
            "message_template_status_update",
            {"event": "DISABLED", "message_template_name": "filler_002", "reason": "NONE"},
        ),
        (
            "message_template_quality_update",
            {
                "message_template_name": "filler_003",
                "previous_quality_score": "YELLOW",
                "new_quality_score": "RED",
            },
        ),
        (
            "template_category_update",
            {
                "message_template_name": "filler_004",
                "correct_category": "MARKETING",
                "new_category": "UTILITY",
            },
        ),
        (
            "message_template_quality_update",
            {
                "message_template_name": "filler_005",
                "previous_quality_score": "UNKNOWN",
                "new_quality_score": "GREEN",
            },
        ),
        (
            "message_template_status_update",
            {"event": "REJECTED", "message_template_name": "old_promo", "reason": "PROMOTIONAL"},
        ),
    )
    main = gateway.ids["main"]
    wait_for(
        lambda: (
            gateway.http.get(
                gateway.v1("/whatsapp/templates"),
                params={"channel_id": main, "name": "filler_005"},
                headers=gateway.headers(),
            ).json()["data"][0]["quality"]
            == "GREEN"
        ),
        what="the webhooks to apply",
    )
    sign_in(page, gateway, f"/settings/templates?channel={main}")

    def row(name: str) -> Any:
        return page.locator(f'tr[data-template="{name}|en"]')

    paused = row("filler_001")
    expect(paused).to_contain_text("Paused")
    expect(paused).to_contain_text("Sends refused")
    expect(paused).to_contain_text(PAUSE)
    expect(paused).to_have_class("attention")
    disabled = row("filler_002")
    expect(disabled).to_contain_text("Disabled")
    expect(disabled).to_contain_text("Sends refused")
    expect(disabled).to_have_class("attention")
    red = row("filler_003")
    expect(red).to_contain_text("Red")
    expect(red).to_contain_text("Low quality")
    expect(red).to_contain_text("Approved")
    expect(red).to_have_class("attention")
    pending = row("filler_004")
    expect(pending).to_contain_text("Utility")
    expect(pending).to_contain_text("to become Marketing (pending)")
    expect(pending).not_to_have_class("attention")
    expect(row("filler_005")).to_contain_text("Green")
    expect(row("filler_006")).to_contain_text("Not rated")
    rejected = row("old_promo")
    expect(rejected).to_contain_text("Rejected")
    expect(rejected).to_contain_text("PROMOTIONAL")

    for width, size in ((1280, "desktop"), (390, "phone")):
        page.set_viewport_size({"width": width, "height": 900})
        for shown, name in ((f"?channel={main}", size), ("", f"{size}-all")):  # all: a Channel column more
            page.goto(f"{gateway.url}/settings/templates{shown}")
            expect(paused.first).to_contain_text(PAUSE)
            # Neither the page nor the table is wider than the screen.
            wider = page.evaluate(
                "document.documentElement.scrollWidth > document.documentElement.clientWidth"
                " || document.querySelector('table.templates').getBoundingClientRect().right"
                " > document.querySelector('#templates-list').getBoundingClientRect().right + 1"
            )
            assert not wider, f"/settings/templates{shown} is wider than the screen at {width} px"
            if SHOTS:
                Path(SHOTS).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(SHOTS) / f"settings-templates-{name}.png"), full_page=True)
                top = page.locator("#templates-list").bounding_box()
                assert top is not None
                clip = {"x": 0, "y": top["y"], "width": width, "height": 900}
                page.screenshot(
                    path=str(Path(SHOTS) / f"settings-templates-{name}-list.png"), clip=clip, full_page=True
                )
