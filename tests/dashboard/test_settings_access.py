"""Settings > API keys, Inboxes, Templates (issue 12, point 2; API.md section 12), on both databases:
a key created in the browser works with the API and is refused at once once revoked; inbox membership
changed in the browser is the API's rule at once; `Sync now` fetches the templates; agents get 403;
every form needs its CSRF token."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from playwright.sync_api import BrowserContext, Page, expect
from test_sign_in import TOKEN, post_login

from support.app_in_thread import sql
from support.harness import AGENT_TOKEN, OTHER_TOKEN, Gateway, new_number, wait_for

LIVE = 15_000  # ms: a sync is the dispatcher's next round (about a second) and one Graph API listing


def sign_in(
    page: Page, gateway: Gateway, target: str, email: str = "admin@acme.test", password: str = "pw-admin"
) -> None:
    page.goto(f"{gateway.url}{target}")
    expect(page).to_have_url(re.compile(r"/login"))
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    expect(page).to_have_url(re.compile(re.escape(target)))


@contextmanager
def signed_in(
    gateway: Gateway, email: str = "admin@acme.test", password: str = "pw-admin"
) -> Iterator[tuple[httpx.Client, str]]:
    """An HTTP client signed in, and its CSRF token."""
    with httpx.Client(base_url=gateway.url) as client:
        assert post_login(client, email, password).status_code == 303
        found = TOKEN.search(client.get("/conversations").text)
        assert found is not None
        yield client, found.group(1)


def user_id(gateway: Gateway, email: str) -> int:
    return int(sql(gateway.database_url, "SELECT id FROM users WHERE email = :email", email=email)[0][0])


def members(gateway: Gateway, channel: str) -> set[str]:
    rows = sql(
        gateway.database_url,
        "SELECT u.email FROM channel_members m JOIN users u ON u.id = m.user_id"
        " WHERE m.channel_id = :channel",
        channel=gateway.ids[channel],
    )
    return {row[0] for row in rows}


def channels_of(gateway: Gateway, token: str) -> httpx.Response:
    return gateway.http.get(gateway.v1("/whatsapp/channels"), headers=gateway.headers(token))


def otp_from(gateway: Gateway, token: str) -> httpx.Response:
    """A real send on Main with `token`: the API's membership rule on its hot (cached) path."""
    template: dict[str, Any] = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
    return gateway.send({"phone_number": new_number(), "template": template}, token=token)


def templates_of(gateway: Gateway, token: str, channel: str) -> httpx.Response:
    return gateway.http.get(
        gateway.v1("/whatsapp/templates"),
        params={"channel_id": gateway.ids[channel]},
        headers=gateway.headers(token),
    )


def test_a_key_created_in_the_browser_works_and_once_revoked_is_refused_at_once(
    page: Page, gateway: Gateway
) -> None:
    sign_in(page, gateway, "/settings/api-keys")
    name = f"ci-{secrets.token_hex(3)}"
    page.get_by_label("Name").fill(name)
    page.get_by_role("button", name="Create API key").click()
    token = page.locator("[data-secret]").inner_text().strip()
    assert token.startswith("wg_")
    answer = channels_of(gateway, token)
    assert answer.status_code == 200, answer.text
    assert {c["channel_id"] for c in answer.json()["data"]} == {gateway.ids["main"], gateway.ids["second"]}

    # Listed with its owner and prefix; only the hash is stored.
    row = page.locator("tr", has=page.get_by_text(name, exact=True))
    expect(row).to_contain_text("Acme Admin")
    expect(row).to_contain_text(token[:12])
    stored = sql(
        gateway.database_url, "SELECT token_hash, token_prefix FROM api_keys WHERE name = :name", name=name
    )
    assert stored and stored[0][0] != token and token not in stored[0][0] and stored[0][1] == token[:12]

    # Shown once: the page of keys, loaded again, has no secret; it shows the key's last use (the
    # request above, written beside it).
    wait_for(
        lambda: sql(gateway.database_url, "SELECT last_used_at FROM api_keys WHERE name = :n", n=name)[0][0],
        what="the key's use to be noted",
    )
    page.goto(f"{gateway.url}/settings/api-keys")
    expect(page.locator("[data-secret]")).to_have_count(0)
    expect(page.get_by_text(token)).to_have_count(0)
    expect(row.locator("[data-last-used] time")).to_have_count(1)

    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke").click()
    expect(page.get_by_role("status")).to_contain_text("revoked")
    expect(row).to_contain_text("Revoked")
    expect(row.get_by_role("button", name="Revoke")).to_have_count(0)
    refused = channels_of(gateway, token)
    assert refused.status_code == 401, refused.text


def test_a_new_key_is_copied_and_a_refused_name_keeps_the_focus_on_the_error(
    page: Page, context: BrowserContext, gateway: Gateway
) -> None:
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=gateway.url)
    sign_in(page, gateway, "/settings/api-keys")
    name = f"copy-{secrets.token_hex(3)}"
    page.get_by_label("Name").fill(name)
    page.get_by_role("button", name="Create API key").click()
    expect(page.get_by_role("heading", name=re.compile("created"))).to_be_focused()
    token = page.locator("[data-secret]").inner_text().strip()
    page.get_by_role("button", name="Copy").click()
    expect(page.locator('[data-copy-status="new-secret"]')).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == token
    # The same name again is refused: the error has the focus, the name field follows it.
    page.get_by_label("Name").fill(name)
    page.get_by_role("button", name="Create API key").click()
    alert = page.get_by_role("alert")
    expect(alert).to_be_focused()
    expect(page.get_by_label("Name")).to_have_attribute("aria-describedby", "key-error")
    page.keyboard.press("Tab")
    expect(page.get_by_label("Name")).to_be_focused()


def test_a_key_for_an_agent_reaches_only_the_agents_inboxes(page: Page, gateway: Gateway) -> None:
    sign_in(page, gateway, "/settings/api-keys")
    page.get_by_label("Name").fill(f"agent-{secrets.token_hex(3)}")
    page.get_by_label("Owner").select_option(label="Acme Agent (agent@acme.test, agent)")
    page.get_by_role("button", name="Create API key").click()
    token = page.locator("[data-secret]").inner_text().strip()
    answer = channels_of(gateway, token)
    assert answer.status_code == 200, answer.text
    assert [c["channel_id"] for c in answer.json()["data"]] == [gateway.ids["main"]]
    # Cancelling the confirmation revokes nothing.
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.locator("tr", has=page.get_by_text("Acme Agent")).first.get_by_role("button", name="Revoke").click()
    assert channels_of(gateway, token).status_code == 200


def test_inbox_members_added_and_removed_in_the_browser_are_the_apis_rule_at_once(
    page: Page, gateway: Gateway
) -> None:
    sign_in(page, gateway, "/settings/inboxes")
    main = page.locator(f"#inbox-{gateway.ids['main']}")
    expect(main).to_contain_text("+15550001111")
    expect(main).to_contain_text("106540352242922")
    expect(main).to_contain_text("80 messages per second")
    expect(main.get_by_role("list", name="Members of Main")).to_contain_text("Acme Agent")

    # The agent's key works on Main, and its right to the channel is now in the process's cache.
    assert otp_from(gateway, AGENT_TOKEN).status_code == 201
    assert templates_of(gateway, AGENT_TOKEN, "main").status_code == 200

    main.get_by_role("listitem").filter(has_text="Acme Agent").get_by_role("button", name="Remove").click()
    expect(page.get_by_role("status")).to_contain_text("Member removed")
    expect(main.get_by_role("list", name="Members of Main")).not_to_contain_text("Acme Agent")
    assert members(gateway, "main") == {"admin@acme.test"}
    refused = otp_from(gateway, AGENT_TOKEN)
    assert refused.status_code == 403, refused.text
    assert templates_of(gateway, AGENT_TOKEN, "main").status_code == 403
    assert channels_of(gateway, AGENT_TOKEN).json()["data"] == []

    main.get_by_label("Add a member").select_option(label="Acme Agent (agent@acme.test, agent)")
    main.get_by_role("button", name="Add member").click()
    expect(page.get_by_role("status")).to_contain_text("Member added")
    expect(main.get_by_role("list", name="Members of Main")).to_contain_text("Acme Agent")
    assert members(gateway, "main") == {"admin@acme.test", "agent@acme.test"}
    accepted = otp_from(gateway, AGENT_TOKEN)
    assert accepted.status_code == 201, accepted.text
    assert templates_of(gateway, AGENT_TOKEN, "main").status_code == 200


def test_sync_now_fetches_the_channels_templates_and_the_page_shows_them(
    page: Page, gateway: Gateway
) -> None:
    second = gateway.ids["second"]
    # As if the channel had never been synced: no templates, no sync time.
    sql(gateway.database_url, "DELETE FROM templates WHERE channel_id = :channel", channel=second)
    sql(
        gateway.database_url,
        "UPDATE channels SET templates_synced_at = NULL WHERE id = :channel",
        channel=second,
    )

    sign_in(page, gateway, f"/settings/templates?channel={second}")
    expect(page.get_by_text("No templates for Second yet")).to_be_visible()
    row = page.locator(f'tr[data-channel-id="{second}"]')
    expect(row).to_contain_text("Never")
    row.get_by_role("button", name="Sync now").click()
    expect(page.get_by_role("status")).to_contain_text("Sync started")
    # The page follows the sync by itself and lists what the simulator serves.
    listing = page.locator('tr[data-template="otp_code|en"]')
    expect(listing).to_be_visible(timeout=LIVE)
    expect(listing).to_contain_text("Authentication")
    expect(listing).to_contain_text("Approved")
    expect(listing).to_contain_text("Body {{1}}")
    expect(row).not_to_contain_text("Never")
    expect(page.locator("#templates-list")).not_to_have_attribute("hx-trigger", re.compile(".*"))
    assert sql(gateway.database_url, "SELECT templates_synced_at FROM channels WHERE id = :c", c=second)[0][0]
    api = templates_of(gateway, "wg_test_admin_token_acme_0001", "second")
    assert api.status_code == 200 and "otp_code" in {t["name"] for t in api.json()["data"]}

    # Filtered by channel: only Second's templates; all channels: a column says whose.
    page.get_by_label("Channel", exact=True).select_option(label="Main (+15550001111)")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(rf"channel={gateway.ids['main']}"))
    expect(page.get_by_role("heading", name="Templates of Main")).to_be_visible()


SETTINGS_PAGES = ["/settings/api-keys", "/settings/inboxes", "/settings/templates"]


def test_an_agent_gets_403_on_each_settings_page_and_action(page: Page, gateway: Gateway) -> None:
    sign_in(page, gateway, "/conversations", "agent@acme.test", "pw-agent")
    for path in SETTINGS_PAGES:
        answer = page.goto(f"{gateway.url}{path}")
        assert answer is not None and answer.status == 403, path
        expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    outsider = user_id(gateway, "outsider@acme.test")
    admin = user_id(gateway, "admin@acme.test")
    with signed_in(gateway, "agent@acme.test", "pw-agent") as (client, csrf):
        for path in SETTINGS_PAGES:
            assert client.get(path).status_code == 403
        keys_before = sql(gateway.database_url, "SELECT count(*) FROM api_keys")
        actions = [
            ("/settings/api-keys", {"name": "mine"}),
            (f"/settings/inboxes/{gateway.ids['main']}/members", {"user_id": str(outsider)}),
            (f"/settings/inboxes/{gateway.ids['main']}/members/{admin}/remove", {}),
            ("/settings/templates/sync", {"channel_id": str(gateway.ids["main"])}),
        ]
        for path, fields in actions:
            assert client.post(path, data={"csrf_token": csrf, **fields}).status_code == 403, path
        assert sql(gateway.database_url, "SELECT count(*) FROM api_keys") == keys_before
        assert members(gateway, "main") == {"admin@acme.test", "agent@acme.test"}


def test_a_post_without_its_csrf_token_is_refused_and_changes_nothing(gateway: Gateway) -> None:
    agent = user_id(gateway, "agent@acme.test")
    key_id = sql(gateway.database_url, "SELECT id FROM api_keys WHERE name = 'agent'")[0][0]
    with signed_in(gateway) as (client, csrf):
        keys_before = sql(gateway.database_url, "SELECT count(*) FROM api_keys")
        forged = [
            ("/settings/api-keys", {"name": "forged"}),
            (f"/settings/api-keys/{key_id}/revoke", {"confirm": "yes"}),
            (f"/settings/inboxes/{gateway.ids['main']}/members/{agent}/remove", {"confirm": "yes"}),
            ("/settings/templates/sync", {"channel_id": str(gateway.ids["main"])}),
        ]
        for path, fields in forged:
            for token in (None, "not-the-token"):
                data = fields if token is None else {**fields, "csrf_token": token}
                refused = client.post(path, data=data)
                assert refused.status_code == 403, path
                assert "security token" in refused.text
        assert sql(gateway.database_url, "SELECT count(*) FROM api_keys") == keys_before
        assert members(gateway, "main") == {"admin@acme.test", "agent@acme.test"}
        assert otp_from(gateway, AGENT_TOKEN).status_code == 201
        # With the token, the same forms work (and an empty name is explained, not stored).
        empty = client.post("/settings/api-keys", data={"csrf_token": csrf, "name": "  "})
        assert empty.status_code == 422 and "needs a name" in empty.text
        assert sql(gateway.database_url, "SELECT count(*) FROM api_keys") == keys_before


def test_another_accounts_keys_users_and_channels_are_out_of_reach(gateway: Gateway) -> None:
    boss = user_id(gateway, "boss@globex.test")
    globex_key = sql(gateway.database_url, "SELECT id FROM api_keys WHERE name = 'erp'")[0][0]
    with signed_in(gateway) as (client, csrf):
        assert (
            client.post(f"/settings/api-keys/{globex_key}/revoke", data={"csrf_token": csrf}).status_code
            == 404
        )
        assert channels_of(gateway, OTHER_TOKEN).status_code == 403  # Globex's key, on Acme's account
        assert (
            gateway.http.get(
                gateway.v1("/whatsapp/channels", gateway.ids["globex"]), headers=gateway.headers(OTHER_TOKEN)
            ).status_code
            == 200
        )
        added = client.post(
            f"/settings/inboxes/{gateway.ids['main']}/members",
            data={"csrf_token": csrf, "user_id": str(boss)},
        )
        assert added.status_code == 404
        foreign = client.post(
            "/settings/templates/sync",
            data={"csrf_token": csrf, "channel_id": str(gateway.ids["globex_channel"])},
        )
        assert foreign.status_code == 404
        owner = client.post(
            "/settings/api-keys", data={"csrf_token": csrf, "name": "x", "user_id": str(boss)}
        )
        assert owner.status_code == 404
        assert client.get(f"/settings/templates?channel={gateway.ids['globex_channel']}").status_code == 404
        pages = "".join(client.get(path).text for path in SETTINGS_PAGES)
        assert "Globex" not in pages and "boss@globex.test" not in pages and "erp" not in pages


def test_the_list_of_keys_is_paged(gateway: Gateway) -> None:
    with signed_in(gateway) as (client, csrf):
        for index in range(51):
            made = client.post("/settings/api-keys", data={"csrf_token": csrf, "name": f"paged-{index:02d}"})
            assert made.status_code == 200, made.text
        first = client.get("/settings/api-keys")
        ids = [int(i) for i in re.findall(r'data-key-id="(\d+)"', first.text)]
        assert len(ids) == 50 and ids == sorted(ids, reverse=True)
        older = re.search(r'href="(/settings/api-keys\?before=\d+)">Older keys', first.text)
        assert older is not None
        rest = [int(i) for i in re.findall(r'data-key-id="(\d+)"', client.get(older.group(1)).text)]
        total = sql(
            gateway.database_url, "SELECT count(*) FROM api_keys WHERE account_id = :a", a=gateway.ids["acme"]
        )
        assert not set(ids) & set(rest) and len(ids) + len(rest) == total[0][0]


def test_the_list_of_templates_is_paged_and_filtered_by_channel(gateway: Gateway) -> None:
    row = re.compile(r'data-template="([^"]+)" data-template-channel="(\d+)"')
    stored = sql(
        gateway.database_url,
        "SELECT name, language, channel_id FROM templates WHERE channel_id IN (:main, :second)",
        main=gateway.ids["main"],
        second=gateway.ids["second"],
    )
    with signed_in(gateway) as (client, _):
        seen: list[tuple[str, str]] = []
        page = client.get("/settings/templates")
        while True:
            assert page.status_code == 200
            found = row.findall(page.text)
            assert len(found) <= 50
            seen += found
            more = re.search(r'href="(/settings/templates\?page=\d+)">Next page', page.text)
            if more is None:
                break
            page = client.get(more.group(1))
        # Each of Acme's templates once, in pages of 50; none of Globex's.
        assert len(seen) == len(set(seen)) == len(stored) > 50
        assert set(seen) == {(f"{name}|{language}", str(channel)) for name, language, channel in stored}
        second = client.get(f"/settings/templates?channel={gateway.ids['second']}")
        assert {channel for _, channel in row.findall(second.text)} == {str(gateway.ids["second"])}
        assert 'hx-trigger="every 2s"' not in second.text  # no sync under way: the page does not poll
