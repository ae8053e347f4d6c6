"""The conversation list over HTTP (issue 11, point 3): tabs, inbox filter, search, keyset paging."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from support.app_in_thread import running_gateway
from support.harness import Gateway, Simulator, new_number, signed_in
from support.receiver import Receiver


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    """Account webhooks may point at the loopback receiver here."""
    with running_gateway(database_url, simulator, allow_private_urls=True) as running:
        yield running


ROW = re.compile(r'data-conversation-id="(\d+)"')
OLDER = re.compile(r'<a class="more" href="([^"]+)">Older conversations</a>')


def test_pages_follow_each_other_without_gaps_or_repeats(gateway: Gateway) -> None:
    sent = [gateway.otp(new_number()).json()["id"] for _ in range(60)]
    wanted = {gateway.message(message_id)["conversation"]["id"] for message_id in sent}
    seen: list[int] = []
    with signed_in(gateway) as client:
        page = client.get("/conversations?status=resolved")
        while True:
            assert page.status_code == 200
            ids = [int(found) for found in ROW.findall(page.text)]
            assert len(ids) <= 50
            seen += ids
            older = OLDER.search(page.text)
            if older is None:
                break
            page = client.get(older.group(1).replace("&amp;", "&"))
    assert len(seen) == len(set(seen))  # no conversation twice
    assert wanted <= set(seen)  # none missing
    # Newest activity first: the last send's conversation leads.
    assert seen[0] == gateway.message(sent[-1])["conversation"]["id"]


def test_tabs_inbox_filter_and_search(gateway: Gateway) -> None:
    number = new_number()
    gateway.otp(number)
    other = gateway.send(
        {
            "channel_id": gateway.ids["second"],
            "phone_number": new_number(),
            "template": {"name": "otp_code", "language": "en", "parameters": ["1"]},
        }
    ).json()["id"]
    other_conversation = gateway.message(other)["conversation"]["id"]
    with signed_in(gateway) as client:
        assert number not in client.get("/conversations").text  # open by default: an API send resolves
        resolved = client.get("/conversations?status=resolved").text
        assert number in resolved
        main_only = client.get(f"/conversations?status=resolved&inbox={gateway.ids['main']}").text
        assert f'data-conversation-id="{other_conversation}"' not in main_only
        found = client.get(f"/conversations?status=resolved&q={number[-7:]}").text
        assert ROW.findall(found) and number in found
        assert "No resolved conversation matches" in client.get("/conversations?status=resolved&q=zzzz").text
    # An agent of Main only: the Second inbox is neither listed nor to be filtered by.
    with signed_in(gateway, "agent@acme.test", "pw-agent") as agent:
        listed = agent.get("/conversations?status=resolved").text
        assert f'data-conversation-id="{other_conversation}"' not in listed
        assert agent.get(f"/conversations?status=resolved&inbox={gateway.ids['second']}").status_code == 403


def test_resolve_and_reopen_fire_conversation_status_changed(gateway: Gateway, receiver: Receiver) -> None:
    hook = gateway.http.post(
        gateway.v1("/webhooks"),
        json={"url": receiver.url("dashboard-actions"), "events": ["conversation_status_changed"]},
        headers=gateway.headers(),
    )
    assert hook.status_code == 201, hook.text
    number = new_number()
    message_id = gateway.otp(number).json()["id"]
    conversation_id = gateway.message(message_id)["conversation"]["id"]
    with signed_in(gateway) as client:
        page = client.get(f"/conversations/{conversation_id}").text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert csrf is not None
        for status in ("open", "resolved"):
            done = client.post(
                f"/conversations/{conversation_id}/status",
                data={"status": status, "csrf_token": csrf.group(1)},
            )
            assert done.status_code == 303
    bodies = [r.json for r in receiver.wait("dashboard-actions", 3)]
    mine = [b for b in bodies if b["conversation"]["id"] == conversation_id]
    moves = [(b["previous_status"], b["conversation"]["status"]) for b in mine]
    # The API send created it resolved; the agent reopened it, then resolved it again.
    assert moves == [(None, "resolved"), ("resolved", "open"), ("open", "resolved")]
    assert all(b["conversation"]["phone_number"] == number for b in mine)
