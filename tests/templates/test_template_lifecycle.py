"""API.md section 14, template lifecycle: Meta's template webhooks applied over HTTP, on both databases.

The simulator changes a template as Meta does (its control API) and posts the matching signed
webhook: a paused template is refused by every kind of send until Meta approves it again, a
recategorised one is priced by its new category, an announced recategorisation is only shown, the
quality shows in operation 2, `template_updated` reaches the account's webhooks, and every channel of
the WABA changes. This module runs its own simulator: it changes templates the other modules send with.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from support.app_in_thread import running_gateway, sql
from support.harness import (
    ADMIN_TOKEN,
    APP_SECRET,
    GLOBEX,
    MAIN,
    SECOND,
    Gateway,
    Simulator,
    new_number,
    post_meta,
    provision_file,
    signed_in,
    wait_for,
)
from support.receiver import Receiver
from wagate.events.example_events import example_event_body
from wagate.events.models import EventKind
from wagate.simulator.app import create_simulator_app
from wagate.simulator.config import SimulatorConfig
from wagate.simulator.server import start_in_thread
from wagate.templates.schemas import TemplateOut

WABA = MAIN["waba_id"]
# A second number of Main's WhatsApp Business Account: the same templates, another channel.
TWIN = {"phone_number_id": "106540352242924", "waba_id": WABA, "display_phone_number": "15550004444"}
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture(scope="module")
def sim(database_url: str) -> Iterator[Simulator]:
    """A simulator for each database: its templates start as seeded."""
    url, stop = start_in_thread(create_simulator_app(SimulatorConfig(app_secret=APP_SECRET)))
    with httpx.Client(timeout=10) as http:
        for channel in (MAIN, SECOND, GLOBEX, TWIN):
            http.post(f"{url}/_sim/channels", json=channel).raise_for_status()
        yield Simulator(url, http)
    stop()


@pytest.fixture(scope="module")
def gw(database_url: str, sim: Simulator) -> Iterator[Gateway]:
    spec = provision_file()
    acme = spec["accounts"][0]
    acme["channels"].append(
        {
            "name": "Twin",
            "phone_number": "+" + TWIN["display_phone_number"],
            "phone_number_id": TWIN["phone_number_id"],
            "waba_id": WABA,
            "access_token": "EAAG-test-Twin",
            "members": ["admin@acme.test"],
        }
    )
    with running_gateway(database_url, sim, spec, allow_private_urls=True) as running:
        yield running


def meta(gw: Gateway, what: str, name: str, **change: Any) -> dict[str, Any]:
    """Meta changes the template (the simulator's control API), and posts its webhook to the gateway."""
    response = gw.sim.http.post(
        f"{gw.sim.url}/_sim/templates/{WABA}/{what}", json={"name": name, "language": "en", **change}
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["delivered"] is True
    return body


def listed(gw: Gateway, name: str, channel: str = "main") -> dict[str, Any]:
    """The template as operation 2 shows it for the channel."""
    response = gw.http.get(
        gw.v1("/whatsapp/templates"),
        params={"channel_id": gw.ids[channel], "name": name},
        headers=gw.headers(),
    )
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["data"]
    assert len(found) <= 1
    return found[0] if found else {}  # none (yet)


def shows(gw: Gateway, name: str, **expected: Any) -> dict[str, Any]:
    """Wait until operation 2 shows the template with these values on Main, then on Twin at once."""
    item = wait_for(
        lambda: (t := listed(gw, name)) and all(t[k] == v for k, v in expected.items()) and t,
        timeout=5,
        what=f"{name} to show {expected}",
    )
    twin = listed(gw, name, "twin")
    assert {k: twin[k] for k in expected} == expected  # every channel of the WABA
    return item


def send(gw: Gateway, body: dict[str, Any], *, dry_run: bool = False) -> httpx.Response:
    return gw.http.post(
        gw.v1("/whatsapp/messages"),
        params={"dry_run": "true"} if dry_run else None,
        json={"channel_id": gw.ids["main"], **body},
        headers=gw.headers(),
    )


def bulk(gw: Gateway, template: dict[str, Any], numbers: list[str]) -> httpx.Response:
    return gw.http.post(
        gw.v1("/whatsapp/bulk_messages"),
        json={"channel_id": gw.ids["main"], "template": template, "phone_numbers": numbers},
        headers=gw.headers(),
    )


def every_kind_of_send(gw: Gateway, template: dict[str, Any]) -> dict[str, httpx.Response]:
    """A single send, a dry run, a bulk send and a text whose fallback is the template (the window of a
    new number is closed, so the fallback would go)."""
    return {
        "single": send(gw, {"phone_number": new_number(), "template": template}),
        "dry run": send(gw, {"phone_number": new_number(), "template": template}, dry_run=True),
        "bulk": bulk(gw, template, [new_number(), new_number()]),
        "fallback": send(gw, {"phone_number": new_number(), "text": "Hi", "fallback_template": template}),
    }


def stored(gw: Gateway, name: str) -> int:
    return int(sql(gw.database_url, "SELECT count(*) FROM messages WHERE template_name = :n", n=name)[0][0])


def test_a_template_paused_by_meta_is_refused_by_every_send_until_meta_approves_it(gw: Gateway) -> None:
    template = {"name": "filler_011", "language": "en"}
    # Sent once, so the template is in the sends' cache when Meta pauses it.
    assert send(gw, {"phone_number": new_number(), "template": template}).status_code == 201
    before = stored(gw, "filler_011")

    meta(gw, "status", "filler_011", status="PAUSED", description="Paused for 3 hours: people blocked it.")
    paused = shows(gw, "filler_011", status="PAUSED")
    assert paused["rejected_reason"] == "Paused for 3 hours: people blocked it."
    # At once: the process that applied the webhook dropped its cached copy of the template.
    for kind, answer in every_kind_of_send(gw, template).items():
        assert answer.status_code == 422, (kind, answer.text)
        assert answer.json()["error"]["code"] == "template_not_approved", kind
    assert stored(gw, "filler_011") == before  # refused before anything was stored

    meta(gw, "status", "filler_011", status="APPROVED")
    approved = shows(gw, "filler_011", status="APPROVED")
    assert approved["rejected_reason"] is None
    answers = every_kind_of_send(gw, template)
    assert {kind: answer.status_code for kind, answer in answers.items()} == {
        "single": 201,
        "dry run": 200,
        "bulk": 202,
        "fallback": 201,
    }
    # Meta took it again too (the simulator refuses a paused template with 132015).
    message = gw.wait_status(answers["single"].json()["id"], "delivered")
    assert message["template"]["name"] == "filler_011"


def test_a_rejection_and_a_disablement_show_why(gw: Gateway) -> None:
    meta(gw, "status", "filler_012", status="REJECTED", reason="INCORRECT_CATEGORY")
    assert shows(gw, "filler_012", status="REJECTED")["rejected_reason"] == "INCORRECT_CATEGORY"
    meta(gw, "status", "filler_012", status="DISABLED")
    disabled = shows(gw, "filler_012", status="DISABLED")
    assert disabled["rejected_reason"] is None  # NONE is no reason
    refused = send(gw, {"phone_number": new_number(), "template": {"name": "filler_012", "language": "en"}})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "template_not_approved"


def test_a_recategorised_templates_next_send_costs_the_new_categorys_price(gw: Gateway) -> None:
    template = {"name": "filler_013", "language": "en"}
    first = send(gw, {"phone_number": new_number(), "template": template}).json()["id"]
    assert gw.message(first)["cost"]["category"] == "UTILITY"
    assert Decimal(gw.message(first)["cost"]["amount"]) == Decimal("0.036")

    meta(gw, "category", "filler_013", category="MARKETING")
    shows(gw, "filler_013", category="MARKETING", pending_category=None)
    second = send(gw, {"phone_number": new_number(), "template": template})
    assert second.status_code == 201, second.text
    message = gw.message(second.json()["id"])
    assert message["template"]["category"] == "MARKETING"
    assert message["cost"]["category"] == "MARKETING" and Decimal(message["cost"]["amount"]) == Decimal(
        "0.165"
    )
    # Meta's statuses price it as marketing too, and the first send keeps the price of its day.
    delivered = gw.wait_status(message["id"], "delivered")
    assert Decimal(delivered["cost"]["amount"]) == Decimal("0.165")
    assert Decimal(gw.wait_status(first, "delivered")["cost"]["amount"]) == Decimal("0.036")


def test_an_announced_recategorisation_is_shown_as_pending_and_changes_no_price(gw: Gateway) -> None:
    template = {"name": "filler_014", "language": "en"}
    meta(gw, "category", "filler_014", category="MARKETING", announce=True)
    shows(gw, "filler_014", category="UTILITY", pending_category="MARKETING")
    dry = send(gw, {"phone_number": new_number(), "template": template}, dry_run=True).json()
    assert dry["cost"]["category"] == "UTILITY" and Decimal(dry["cost"]["amount"]) == Decimal("0.036")
    sent = send(gw, {"phone_number": new_number(), "template": template}).json()
    assert Decimal(gw.message(sent["id"])["cost"]["amount"]) == Decimal("0.036")

    meta(gw, "category", "filler_014", category="MARKETING")  # the change Meta announced, made
    shows(gw, "filler_014", category="MARKETING", pending_category=None)


def test_quality_shows_in_the_template_list(gw: Gateway) -> None:
    assert listed(gw, "filler_015")["quality"] is None  # Meta has not rated it yet
    meta(gw, "quality", "filler_015", quality="YELLOW")
    shows(gw, "filler_015", quality="YELLOW")
    meta(gw, "quality", "filler_015", quality="RED")
    shows(gw, "filler_015", quality="RED", status="APPROVED")
    # A RED template can still be sent (Meta may pause it soon).
    sent = send(gw, {"phone_number": new_number(), "template": {"name": "filler_015", "language": "en"}})
    assert sent.status_code == 201


def test_template_updated_reaches_the_accounts_webhook_once_per_change(
    gw: Gateway, receiver: Receiver
) -> None:
    hook = gw.http.post(
        gw.v1("/webhooks"),
        json={"url": receiver.url("templates"), "events": ["template_updated"]},
        headers=gw.headers(),
    )
    assert hook.status_code == 201, hook.text
    secret = hook.json()["secret"]

    def events(expected: int) -> list[dict[str, Any]]:
        received = receiver.wait("templates", expected)
        return [Webhook(secret).verify(r.body, r.headers) for r in received]

    try:
        meta(gw, "status", "filler_016", status="PAUSED")
        paused = events(2)  # one for each channel of the WABA: Main and Twin
        assert sorted(e["template"]["channel_id"] for e in paused) == sorted([gw.ids["main"], gw.ids["twin"]])
        for event in paused:
            assert event["event"] == "template_updated" and event["account_id"] == gw.ids["acme"]
            assert event["changes"] == {"status": {"from": "APPROVED", "to": "PAUSED"}}
            item = event["template"]
            assert (item["name"], item["status"], item["category"]) == ("filler_016", "PAUSED", "UTILITY")
            assert item["rejected_reason"].startswith("Your WhatsApp message template has been paused")
            assert item == listed(
                gw, "filler_016", "main" if item["channel_id"] == gw.ids["main"] else "twin"
            )

        # The same webhook again changes nothing and fires nothing; the next change fires its own.
        meta(gw, "status", "filler_016", status="PAUSED")
        meta(gw, "category", "filler_016", category="MARKETING", announce=True)
        meta(gw, "quality", "filler_016", quality="RED")
        later = events(6)[2:]
        # In order for each channel's template (one ordering key each); the two go side by side.
        for channel in ("main", "twin"):
            assert [e["changes"] for e in later if e["template"]["channel_id"] == gw.ids[channel]] == [
                {"pending_category": {"from": None, "to": "MARKETING"}},
                {"quality": {"from": None, "to": "RED"}},
            ]
        meta(gw, "category", "filler_016", category="MARKETING")
        done = events(8)[6:]
        for event in done:
            assert event["changes"] == {
                "category": {"from": "UTILITY", "to": "MARKETING"},
                "pending_category": {"from": "MARKETING", "to": None},
            }
        # Listed among the deliveries of the webhook, as every event.
        deliveries = gw.http.get(
            gw.v1(f"/webhooks/{hook.json()['id']}/deliveries"), headers=gw.headers()
        ).json()
        assert {d["event"] for d in deliveries["data"]} == {"template_updated"}
    finally:
        gw.http.delete(gw.v1(f"/webhooks/{hook.json()['id']}"), headers=gw.headers(ADMIN_TOKEN))


def test_the_sync_agrees_with_the_webhooks_and_keeps_an_announced_change(gw: Gateway) -> None:
    meta(gw, "status", "filler_017", status="PAUSED", description="Paused: low read rate.")
    meta(gw, "quality", "filler_017", quality="RED")
    meta(gw, "category", "filler_017", category="MARKETING", announce=True)
    meta(gw, "status", "old_promo", status="REJECTED", reason="PROMOTIONAL")
    expected = {"status": "PAUSED", "quality": "RED", "pending_category": "MARKETING", "category": "UTILITY"}
    shows(gw, "filler_017", **expected)
    synced = sql(gw.database_url, "SELECT templates_synced_at FROM channels WHERE id = :c", c=gw.ids["main"])[
        0
    ][0]

    with signed_in(gw) as client:
        token = CSRF.search(client.get("/settings/templates").text)
        assert token is not None
        sync = client.post(
            "/settings/templates/sync", data={"csrf_token": token.group(1), "channel_id": gw.ids["main"]}
        )
        assert sync.status_code == 303
    wait_for(
        lambda: (
            sql(gw.database_url, "SELECT templates_synced_at FROM channels WHERE id = :c", c=gw.ids["main"])[
                0
            ][0]
            != synced
        ),
        timeout=15,
        what="the sync",
    )
    after = listed(gw, "filler_017")
    assert {k: after[k] for k in expected} == expected
    assert after["rejected_reason"] == "Paused: low read rate."  # the listing has no pause reason: kept
    assert listed(gw, "old_promo")["rejected_reason"] == "PROMOTIONAL"


def test_unknown_values_and_odd_items_do_not_stop_the_rest_of_the_body(gw: Gateway) -> None:
    dead_before = int(sql(gw.database_url, "SELECT count(*) FROM dead_letters")[0][0])

    def change(field: str, **value: Any) -> dict[str, Any]:
        return {"field": field, "value": {"message_template_language": "en", **value}}

    body = {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": WABA,
                "time": 1795500000,
                "changes": [
                    # An event Meta added since: kept for an operator, nothing changed.
                    change(
                        "message_template_status_update",
                        event="SOMETHING_NEW",
                        message_template_name="filler_018",
                    ),
                    # A score Meta added since: UNKNOWN.
                    change(
                        "message_template_quality_update",
                        message_template_name="filler_018",
                        previous_quality_score="GREEN",
                        new_quality_score="AMBER",
                    ),
                    # Not a template change Meta could send: no template named.
                    change("message_template_quality_update", new_quality_score="RED"),
                    # An id the gateway does not know: found by name and language.
                    change(
                        "message_template_status_update",
                        event="PAUSED",
                        message_template_id=1,
                        message_template_name="filler_019",
                        reason="NONE",
                    ),
                ],
            },
            {
                "id": "999999",
                "changes": [
                    change("message_template_quality_update", message_template_id=2, new_quality_score="RED")
                ],
            },
        ],
    }
    assert post_meta(gw, body).status_code == 200
    shows(gw, "filler_019", status="PAUSED")
    shows(gw, "filler_018", quality="UNKNOWN", status="APPROVED")
    dead = wait_for(
        lambda: (
            (n := int(sql(gw.database_url, "SELECT count(*) FROM dead_letters")[0][0]) - dead_before) >= 3
            and n
        ),
        what="three dead letters",
    )
    assert dead == 3  # the unknown event, the change naming no template, the WABA of no channel
    reasons = [r for (r,) in sql(gw.database_url, "SELECT error FROM dead_letters ORDER BY id DESC LIMIT 3")]
    assert any("SOMETHING_NEW" in r for r in reasons) and any("999999" in r for r in reasons)


def test_a_template_approved_since_the_last_sync_is_synced_at_once(gw: Gateway) -> None:
    templates = gw.sim.http.get(f"{gw.sim.url}/_sim/templates/{WABA}").json()["data"]
    fresh = {"name": "brand_new", "language": "en", "status": "PENDING", "category": "UTILITY"}
    fresh["components"] = [{"type": "BODY", "text": "Welcome aboard, {{1}}."}]
    gw.sim.http.put(
        f"{gw.sim.url}/_sim/templates/{WABA}", json={"data": [*templates, fresh]}
    ).raise_for_status()
    # Its approval names a template the gateway never listed: the WABA's channels sync now, not in an hour.
    meta(gw, "status", "brand_new", status="APPROVED")
    shows(gw, "brand_new", status="APPROVED", variables=["1"])
    sent = send(
        gw,
        {
            "phone_number": new_number(),
            "template": {"name": "brand_new", "language": "en", "parameters": ["Aysel"]},
        },
    )
    assert sent.status_code == 201, sent.text


def test_the_test_event_of_template_updated_has_the_shape_of_the_real_one() -> None:
    body = example_event_body(EventKind.template_updated, 7)
    assert (body["event"], body["account_id"], body["test"]) == ("template_updated", 7, True)
    assert set(body["template"]) == set(TemplateOut.model_fields)
    assert body["changes"] == {"status": {"from": "APPROVED", "to": "PAUSED"}}
