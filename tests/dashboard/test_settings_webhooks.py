"""Settings > Integrations > Webhook (issue 12, point 1; API.md section 12) on both databases: a webhook
added in a browser gets its events at the loopback receiver and lists them with their HTTP status,
`Redeliver` and `Send test event` reach the receiver, the SSRF guard's refusal shows on the form, the
secret is shown once and signs what is delivered; edit, disable (by hand and by a 410), enable and
delete; agents get 403 and a POST without its CSRF token changes nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from playwright.sync_api import BrowserContext, Locator, Page, expect
from standardwebhooks import Webhook as Verifier

from support.app_in_thread import gateway_with_app, running_gateway
from support.harness import Gateway, Simulator, new_number, signed_in, wait_for
from support.receiver import Receiver

PAGE = "/settings/integrations/webhooks"
LIVE = 10_000  # ms: the page fetches a webhook's deliveries again every 3 s while one is awaited
TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')
# The strict gateway of the SSRF test shares the module's database, so it needs the same key.
SECRET_KEY = Fernet.generate_key().decode()


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    """Webhooks may point at the loopback `receiver` here (WAGATE_ALLOW_PRIVATE_URLS)."""
    with running_gateway(database_url, simulator, secret_key=SECRET_KEY, allow_private_urls=True) as running:
        yield running


@pytest.fixture
def strict_gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    """A second process on the same database with the guard's default: only public addresses. It
    delivers nothing and the simulator stays aimed at the module's gateway."""
    with gateway_with_app(database_url, simulator, secret_key=SECRET_KEY, run_dispatcher=False) as (
        running,
        _,
    ):
        yield running


def sign_in(page: Page, gateway: Gateway, email: str = "admin@acme.test", password: str = "pw-admin") -> None:
    page.goto(f"{gateway.url}{PAGE}")
    expect(page).to_have_url(re.compile(r"/login"))
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()


def card(page: Page, url: str) -> Locator:
    """A webhook's card and its recent deliveries, found by its URL."""
    webhook = page.locator(".webhook", has=page.get_by_role("heading", name=url, exact=True))
    webhook_id = webhook.get_attribute("data-webhook-id")
    return page.locator(f"#webhook-{webhook_id}, #deliveries-{webhook_id}")


def add_in_browser(page: Page, gateway: Gateway, url: str, *events: str) -> str:
    """Add a webhook with the form; its secret, shown this once."""
    page.goto(f"{gateway.url}{PAGE}")
    page.get_by_label("Webhook URL").fill(url)
    for label in ("Message updated", "Message created", "Conversation status changed", "Batch completed"):
        page.get_by_label(label, exact=True).set_checked(label in events)
    page.get_by_role("button", name="Create webhook").click()
    expect(page.get_by_text("it will not be shown again")).to_be_visible()
    secret = page.locator("[data-secret]").inner_text()
    assert secret.startswith("whsec_")
    return secret


def deliveries(gateway: Gateway, webhook_id: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = gateway.http.get(
        gateway.v1(f"/webhooks/{webhook_id}/deliveries"), headers=gateway.headers()
    ).json()["data"]
    return found


def webhook_with(gateway: Gateway, url: str, via: Gateway | None = None) -> dict[str, Any] | None:
    listed = (via or gateway).http.get(gateway.v1("/webhooks"), headers=gateway.headers()).json()["data"]
    return next((w for w in listed if w["url"] == url), None)


def settled(gateway: Gateway, webhook_id: int, count: int = 1) -> list[dict[str, Any]]:
    """The webhook's deliveries once at least `count` exist and none is under way."""
    return wait_for(
        lambda: (
            (
                (found := deliveries(gateway, webhook_id))
                and len(found) >= count
                and all(d["state"] != "pending" for d in found)
                and found
            )
            or None
        ),
        what=f"{count} finished deliveries",
    )


def test_a_webhook_added_in_the_browser_lists_its_first_delivery_and_redelivers_it(
    page: Page, gateway: Gateway, receiver: Receiver
) -> None:
    url = receiver.url("otp")
    sign_in(page, gateway)
    secret = add_in_browser(page, gateway, url, "Message updated")
    webhook = webhook_with(gateway, url)
    assert webhook is not None and webhook["events"] == ["message_updated"]
    recent = card(page, url)
    expect(recent.get_by_text("No deliveries yet")).to_be_visible()

    gateway.otp(new_number())
    first = receiver.wait("otp", 1)[0]
    Verifier(secret).verify(first.body, first.headers)  # the secret shown is the one that signs
    assert first.json["event"] == "message_updated"
    event_id = first.headers["webhook-id"]
    # The open page shows it without a reload: HTTP 200, delivered.
    row = recent.locator(f'[data-delivery-id="{event_id}"]')
    expect(row).to_have_attribute("data-state", "delivered", timeout=LIVE)
    expect(row).to_have_attribute("data-http-status", "200")
    expect(row).to_contain_text("Message updated")
    expect(row).to_contain_text("HTTP 200")

    # The secret was shown once: a reload shows the page without it, and posts nothing again.
    settled(gateway, webhook["id"])
    page.reload()
    expect(page.get_by_role("heading", name="Webhooks", exact=True)).to_be_visible()
    expect(page.locator("[data-secret]")).to_have_count(0)
    listed = gateway.http.get(gateway.v1("/webhooks"), headers=gateway.headers()).json()["data"]
    assert [w["url"] for w in listed].count(url) == 1
    row = card(page, url).locator(f'[data-delivery-id="{event_id}"]')
    row.get_by_role("button", name="Redeliver").click()
    expect(page.get_by_role("status")).to_contain_text("Sent again")
    again = wait_for(
        lambda: [r for r in receiver.received("otp") if r.headers["webhook-id"] == event_id][1:] or None,
        what="the redelivery",
    )
    assert again[0].body == first.body
    row = card(page, url).locator(f'[data-delivery-id="{event_id}"]')
    expect(row).to_contain_text("2 attempts", timeout=LIVE)
    expect(row).to_have_attribute("data-state", "delivered")
    # Its attempts, the request and (for an endpoint on a private address) no response kept.
    row.get_by_text("Attempts, request and response").click()
    expect(row.locator(".attempts tbody tr")).to_have_count(2)
    expect(row.locator(".payload")).to_contain_text('"event": "message_updated"')
    expect(row).to_contain_text("Nothing kept")


def test_send_test_event_reaches_the_receiver(page: Page, gateway: Gateway, receiver: Receiver) -> None:
    url = receiver.url("test-event")
    sign_in(page, gateway)
    secret = add_in_browser(page, gateway, url, "Batch completed")
    page.goto(f"{gateway.url}{PAGE}")
    card(page, url).get_by_role("button", name="Send test event").click()
    expect(page.get_by_role("status")).to_contain_text("test event is on its way")
    [got] = receiver.wait("test-event", 1)
    Verifier(secret).verify(got.body, got.headers)
    body = got.json
    assert body["event"] == "batch_completed" and body["test"] is True
    assert body["batch"]["counts"]["delivered"] == 1
    row = card(page, url).locator(f'[data-delivery-id="{got.headers["webhook-id"]}"]')
    expect(row).to_have_attribute("data-state", "delivered", timeout=LIVE)
    expect(row).to_contain_text("Batch completed")
    expect(row).to_contain_text("Test")
    expect(row).to_contain_text("HTTP 200")


def test_an_address_the_ssrf_guard_refuses_shows_the_error(
    page: Page, gateway: Gateway, strict_gateway: Gateway
) -> None:
    sign_in(page, strict_gateway)
    page.goto(f"{strict_gateway.url}{PAGE}")
    inside = "http://127.0.0.1:9/hook"
    page.get_by_label("Webhook URL").fill(inside)
    page.get_by_role("button", name="Create webhook").click()
    expect(page.get_by_role("alert")).to_contain_text("not public")
    expect(page.get_by_label("Webhook URL")).to_have_value(inside)
    expect(page.get_by_label("Webhook URL")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Webhook URL")).to_be_focused()  # the field to correct, at hand
    expect(page.locator("[data-secret]")).to_have_count(0)
    assert webhook_with(gateway, inside, via=strict_gateway) is None
    # The other rules of the API hold as well: events, and URLs that cannot be connected to.
    page.get_by_label("Webhook URL").fill("https://93.184.215.14/hooks/wa")
    page.get_by_label("Message updated").uncheck()
    page.get_by_role("button", name="Create webhook").click()
    expect(page.get_by_role("alert")).to_have_text("Choose at least one event.")
    expect(page.get_by_label("Message updated")).to_be_focused()
    page.get_by_label("Webhook URL").fill("ftp://93.184.215.14/hooks")
    page.get_by_label("Message created").check()
    page.get_by_role("button", name="Create webhook").click()
    expect(page.get_by_role("alert")).to_contain_text("http or https")
    expect(page.get_by_label("Message created")).to_be_checked()


def test_copy_puts_the_secret_on_the_clipboard_and_says_so(
    page: Page, context: BrowserContext, gateway: Gateway, receiver: Receiver
) -> None:
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=gateway.url)
    sign_in(page, gateway)
    secret = add_in_browser(page, gateway, receiver.url("copied"), "Message updated")
    # The focus lands on what was just made, the Copy button next to it.
    expect(page.get_by_role("heading", name="Webhook created")).to_be_focused()
    announced = page.locator('[data-copy-status="webhook-secret"]')
    expect(announced).to_have_attribute("aria-live", "polite")
    expect(announced).to_have_text("")
    page.get_by_role("button", name="Copy").click()
    expect(announced).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == secret


def test_without_the_clipboard_copy_selects_the_secret(
    page: Page, gateway: Gateway, receiver: Receiver
) -> None:
    # Plain http to a host name is not a secure context: no clipboard; the secret is selected instead.
    page.add_init_script("Object.defineProperty(navigator, 'clipboard', { value: undefined })")
    sign_in(page, gateway)
    secret = add_in_browser(page, gateway, receiver.url("selected"), "Message updated")
    page.get_by_role("button", name="Copy").click()
    expect(page.locator('[data-copy-status="webhook-secret"]')).to_contain_text("Ctrl+C")
    assert page.evaluate("window.getSelection().toString()").strip() == secret


# Over HTTP: the actions one by one, the refusals.


def csrf(client: httpx.Client, path: str = PAGE) -> str:
    found = TOKEN.search(client.get(path).text)
    assert found is not None
    return found.group(1)


def create(client: httpx.Client, url: str, *events: str) -> httpx.Response:
    fields = {"csrf_token": csrf(client), "url": url, **{f"event:{e}": "on" for e in events}}
    return client.post(PAGE, data=fields)


def test_edit_disable_enable_and_delete(gateway: Gateway, receiver: Receiver) -> None:
    url = receiver.url("edited")
    with signed_in(gateway) as client:
        created = create(client, url, "message_updated")
        assert created.status_code == 200 and "data-secret" in created.text
        webhook = webhook_with(gateway, url)
        assert webhook is not None
        hook = f"{PAGE}/{webhook['id']}"
        token = csrf(client)

        edit = client.get(f"{hook}/edit")
        assert edit.status_code == 200 and f'value="{url}"' in edit.text
        moved = receiver.url("edited-2")
        saved = client.post(
            f"{hook}/edit",
            data={
                "csrf_token": token,
                "url": moved,
                "event:message_created": "on",
                "event:batch_completed": "on",
            },
        )
        assert saved.status_code == 303 and saved.headers["location"] == f"{hook}?done=saved"
        changed = webhook_with(gateway, moved)
        assert changed is not None and changed["events"] == ["message_created", "batch_completed"]
        refused = client.post(f"{hook}/edit", data={"csrf_token": token, "url": moved})
        assert refused.status_code == 422 and "Choose at least one event." in refused.text

        off = client.post(f"{hook}/enabled", data={"csrf_token": token, "enabled": "false", "back": PAGE})
        assert (
            off.status_code == 303
            and off.headers["location"] == f"{PAGE}?done=disabled#webhook-{webhook['id']}"
        )
        listed = client.get(PAGE).text
        assert "Disabled by an administrator." in listed and ">Enable</button>" in listed
        # A disabled webhook takes no test event: the page says why (409 webhook_disabled).
        test = client.post(f"{hook}/test", data={"csrf_token": token, "back": PAGE})
        assert test.status_code == 409 and "enable it before sending it a test event" in test.text
        on = client.post(f"{hook}/enabled", data={"csrf_token": token, "enabled": "true", "back": hook})
        assert on.status_code == 303 and on.headers["location"] == f"{hook}?done=enabled"
        assert webhook_with(gateway, moved) == {**changed, "enabled": True}

        # Another place to go back to than ours is not followed.
        away = client.post(f"{hook}/test", data={"csrf_token": token, "back": "https://evil.example/"})
        assert away.status_code == 303 and away.headers["location"].startswith(f"{hook}?done=test")
        receiver.wait("edited-2", 1)

        deleted = client.post(f"{hook}/delete", data={"csrf_token": token, "back": hook})
        assert deleted.status_code == 303 and deleted.headers["location"] == f"{PAGE}?done=deleted"
        assert webhook_with(gateway, moved) is None
        assert client.get(hook).status_code == 404


def test_a_webhook_disabled_by_a_410_shows_why_and_redelivers_once_enabled(
    gateway: Gateway, receiver: Receiver
) -> None:
    url = receiver.url("gone")
    receiver.answer("gone", 410)
    with signed_in(gateway) as client:
        create(client, url, "message_updated")
        webhook = webhook_with(gateway, url)
        assert webhook is not None
        hook = f"{PAGE}/{webhook['id']}"
        token = csrf(client)
        client.post(f"{hook}/test", data={"csrf_token": token})
        [delivery] = settled(gateway, webhook["id"])
        assert delivery["state"] == "failed"
        page = client.get(hook).text
        assert "the endpoint answered 410 Gone" in page and 'data-enabled="false"' in page
        assert 'data-http-status="410"' in page

        redeliver = f"{hook}/deliveries/{delivery['id']}/redeliver"
        refused = client.post(redeliver, data={"csrf_token": token, "back": hook})
        assert refused.status_code == 409
        assert "The webhook is disabled; enable it before re-delivering its events." in refused.text
        assert len(receiver.received("gone")) == 1

        client.post(f"{hook}/enabled", data={"csrf_token": token, "enabled": "true"})
        done = client.post(redeliver, data={"csrf_token": token, "back": hook})
        assert done.status_code == 303 and done.headers["location"] == f"{hook}?done=redelivered"
        [_, second] = receiver.wait("gone", 2)
        assert second.headers["webhook-id"] == delivery["id"]
        missing = client.post(f"{hook}/deliveries/evt_none/redeliver", data={"csrf_token": token})
        assert missing.status_code == 404


def test_deliveries_are_paged(gateway: Gateway, receiver: Receiver) -> None:
    url = receiver.url("paged")
    with signed_in(gateway) as client:
        create(client, url, "conversation_status_changed")
        webhook = webhook_with(gateway, url)
        assert webhook is not None
        hook = f"{PAGE}/{webhook['id']}"
        token = csrf(client)
        for _ in range(23):
            assert client.post(f"{hook}/test", data={"csrf_token": token}).status_code == 303
        made = [d["id"] for d in settled(gateway, webhook["id"], 23)]
        seen: list[str] = []
        page = client.get(hook)
        while True:
            assert page.status_code == 200
            seen += re.findall(r'data-delivery-id="([^"]+)"', page.text)
            older = re.search(r'href="([^"]+)">Older deliveries<', page.text)
            if older is None:
                break
            page = client.get(older.group(1).replace("&amp;", "&"))
        assert seen == made  # newest first, each once, 20 and then 3
        listed = client.get(PAGE).text
        assert "All deliveries of this webhook" in listed


def test_an_agent_gets_403_and_another_accounts_webhook_is_404(gateway: Gateway) -> None:
    with signed_in(gateway, "agent@acme.test", "pw-agent") as agent:
        page = agent.get(PAGE)
        assert page.status_code == 403 and "Not allowed" in page.text
        token = csrf(agent, "/conversations")
        refused = agent.post(
            PAGE, data={"csrf_token": token, "url": "https://93.184.215.14/a", "event:message_updated": "on"}
        )
        assert refused.status_code == 403
    assert webhook_with(gateway, "https://93.184.215.14/a") is None
    with signed_in(gateway, "boss@globex.test", "pw-boss") as boss:
        create(boss, "https://93.184.215.14/globex", "message_updated")
        assert "https://93.184.215.14/globex" in boss.get(PAGE).text
    with signed_in(gateway) as admin:
        assert "https://93.184.215.14/globex" not in admin.get(PAGE).text
        listed = httpx.get(
            f"{gateway.url}/v1/accounts/{gateway.ids['globex']}/webhooks",
            headers=gateway.headers("wg_test_admin_token_globex_01"),
        ).json()["data"]
        theirs = next(w["id"] for w in listed if w["url"] == "https://93.184.215.14/globex")
        assert admin.get(f"{PAGE}/{theirs}").status_code == 404
        token = csrf(admin)
        assert admin.post(f"{PAGE}/{theirs}/delete", data={"csrf_token": token}).status_code == 404
        assert admin.post(f"{PAGE}/{theirs}/test", data={"csrf_token": token}).status_code == 404


def test_a_post_without_its_csrf_token_is_refused(gateway: Gateway) -> None:
    with signed_in(gateway) as client:
        url = "https://93.184.215.14/csrf"
        missing = client.post(PAGE, data={"url": url, "event:message_updated": "on"})
        assert missing.status_code == 403
        wrong = client.post(PAGE, data={"csrf_token": "guess", "url": url, "event:message_updated": "on"})
        assert wrong.status_code == 403
        assert webhook_with(gateway, url) is None
        create(client, url, "message_updated")
        webhook = webhook_with(gateway, url)
        assert webhook is not None
        for action, fields in (("delete", {}), ("enabled", {"enabled": "false"}), ("test", {})):
            refused = client.post(f"{PAGE}/{webhook['id']}/{action}", data=fields)
            assert refused.status_code == 403
        assert webhook_with(gateway, url) == webhook  # still there, still enabled
        assert deliveries(gateway, webhook["id"]) == []
