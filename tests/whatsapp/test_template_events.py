"""Meta's template lifecycle webhooks (API.md section 14) parsed from saved payloads in the shapes of
Meta's webhooks reference: status, category (announced and completed) and quality updates."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from wagate.whatsapp.outbound import TemplateRecord
from wagate.whatsapp.template_events import (
    QualityScore,
    TemplateCategoryChange,
    TemplateEvent,
    TemplateQualityChange,
    TemplateRef,
    TemplateStatusChange,
)
from wagate.whatsapp.webhook_body import parse_webhook

FIXTURES = Path(__file__).parent / "fixtures"
WABA = "102290129340398"
ORDER_UPDATE = TemplateRef(WABA, "1689556908129832", "order_update", "en")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def test_a_pause_names_the_template_and_says_why_in_metas_words() -> None:
    parsed = parse_webhook(load("template_status_paused.json"))
    assert parsed.changes == () and parsed.odd == ()
    [change] = parsed.templates
    assert isinstance(change, TemplateStatusChange)
    # The id comes as a JSON number; the WABA is the entry's id (there is no metadata).
    assert change.template == ORDER_UPDATE
    assert change.event is TemplateEvent.PAUSED and change.new_status == "PAUSED"
    # A pause's reason is NONE: its description says why.
    assert change.reason is not None and change.reason.startswith(
        "Your WhatsApp message template has been paused"
    )


def test_a_rejection_keeps_metas_reason_and_its_detail() -> None:
    [change] = parse_webhook(load("template_status_rejected.json")).templates
    assert isinstance(change, TemplateStatusChange)
    assert change.new_status == "REJECTED"
    assert change.reason == "INVALID_FORMAT: The template has a variable at the start of its body."


def test_events_that_are_not_statuses_change_none_and_unknown_ones_do_not_crash() -> None:
    body = load("template_status_paused.json")
    value = body["entry"][0]["changes"][0]["value"]
    expected = {
        "APPROVED": "APPROVED",
        "REINSTATED": "APPROVED",
        "UNARCHIVED": "APPROVED",
        "disabled": "DISABLED",
    }
    expected |= {"FLAGGED": None, "LOCKED": None, "UNLOCKED": None, "SOMETHING_NEW": None}
    for event, status in expected.items():
        value["event"] = event
        [change] = parse_webhook(body).templates
        assert isinstance(change, TemplateStatusChange) and change.new_status == status, event
    assert change.event is TemplateEvent.UNKNOWN and change.raw_event == "SOMETHING_NEW"
    value["reason"] = None  # Meta's null for a template scheduled for deletion
    del value["other_info"]
    [change] = parse_webhook(body).templates
    assert isinstance(change, TemplateStatusChange) and change.reason is None


def test_a_completed_and_an_announced_recategorisation() -> None:
    [done] = parse_webhook(load("template_category_completed.json")).templates
    assert isinstance(done, TemplateCategoryChange) and not done.announced
    assert (done.previous_category, done.new_category) == ("UTILITY", "MARKETING")
    [notice] = parse_webhook(load("template_category_announced.json")).templates
    assert isinstance(notice, TemplateCategoryChange) and notice.announced
    # Announced: `new_category` is the current one; the change to come is `correct_category`.
    assert (notice.correct_category, notice.new_category) == ("MARKETING", "UTILITY")
    assert notice.update_timestamp == 1795586400


def test_a_quality_update_and_a_score_meta_added_later() -> None:
    body = load("template_quality_red.json")
    [change] = parse_webhook(body).templates
    assert isinstance(change, TemplateQualityChange) and change.template == ORDER_UPDATE
    assert (change.previous_quality, change.new_quality) == (QualityScore.YELLOW, QualityScore.RED)
    body["entry"][0]["changes"][0]["value"]["new_quality_score"] = "AMBER"
    [change] = parse_webhook(body).templates
    assert isinstance(change, TemplateQualityChange) and change.new_quality is QualityScore.UNKNOWN


def test_an_unreadable_change_is_an_odd_item_and_the_rest_of_the_body_is_read() -> None:
    good = load("template_quality_red.json")["entry"][0]["changes"][0]
    no_template = copy.deepcopy(good)
    for key in ("message_template_id", "message_template_name"):
        del no_template["value"][key]
    no_score = copy.deepcopy(good)
    no_score["value"]["new_quality_score"] = ["RED"]
    no_event = load("template_status_paused.json")["entry"][0]["changes"][0]
    del no_event["value"]["event"]
    not_an_object = {"field": "template_category_update", "value": ["MARKETING"]}
    body = {
        "object": "whatsapp_business_account",
        "entry": [
            {"id": WABA, "changes": [no_template, good, no_score, no_event, not_an_object]},
            {"changes": [good]},  # no WABA id: whose template?
        ],
    }
    parsed = parse_webhook(body)
    assert [type(change) for change in parsed.templates] == [TemplateQualityChange]
    reasons = [item.reason for item in parsed.odd]
    assert len(reasons) == 5
    assert "names no template" in reasons[0] and "new_quality_score" in reasons[1]
    assert "value.event" in reasons[2] and "must be an object" in reasons[3] and "entry[].id" in reasons[4]


def test_the_template_listing_gives_quality_and_rejection_reason() -> None:
    listed = TemplateRecord.from_dict(
        {
            "name": "old_promo",
            "language": "en",
            "status": "REJECTED",
            "category": "MARKETING",
            "id": "1",
            "quality_score": {"score": "RED", "date": 1795500000},
            "rejected_reason": "PROMOTIONAL",
        }
    )
    assert (listed.quality, listed.rejected_reason) == ("RED", "PROMOTIONAL")
    approved = TemplateRecord.from_dict(
        {"name": "a", "language": "en", "status": "APPROVED", "rejected_reason": "NONE"}
    )
    assert (approved.quality, approved.rejected_reason) == (None, None)
