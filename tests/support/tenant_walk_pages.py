"""The tenant-isolation walk's dashboard walkers (tests/test_tenant_isolation.py): each walker, signed
in, GETs every page and POSTs every form with account A's values, and listens on the live stream.

- `walk_dashboard`: every route (A's ids in paths and queries, the htmx parts of `QUERY_PARTS`), and
  every form of `FORMS` posted with the walker's own CSRF token; a POST route missing from `FORMS`
  fails the walk by name. B's inbox and user stand beside A's (`CROSS`).
- `walk_dashboard_control`: A's administrator GETs every page: the markers are where the walk looks.
- `walk_live`: every walker listens on `/live` while A's customers write; each hears only its own
  inboxes.

The routes given are the ones to walk: the test leaves out its `NOT_WALKED`.
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import httpx

from support.app_in_thread import sql
from support.harness import GLOBEX, MAIN, SECOND, Gateway, new_number, wait_for
from support.tenant_accounts import CONTROL, AccountA, Actor, csrf_of
from support.tenant_walk import (
    PATH_KINDS,
    QUERY_KINDS,
    PageRoute,
    Walk,
    call,
    expand,
    judge,
    placeholders,
)

# Query parameters that choose a part of a page (htmx fragments): walked with each of these values.
QUERY_PARTS: dict[str, tuple[str, ...]] = {
    "part": ("messages", "state", "sync", "list"),
    "fragment": ("true",),
}

# Dashboard forms by route, with `{kind}` placeholders (each filled with A's values); a POST route
# not listed here fails the walk until it is taught.
FORMS: dict[str, list[dict[str, str]]] = {
    "/conversations/{conversation_id}/status": [{"status": "resolved"}, {"status": "pending"}],
    "/conversations/{conversation_id}/reply": [{"text": "isob-walk reply"}],
    "/conversations/{conversation_id}/messages/{message_id}/retry": [{}],
    # The bulk form without JavaScript, its inbox chosen: the form again for that inbox.
    "/bulk/new": [{"inbox": "{channel}"}, {"inbox": "{channel}", "template": "{template}|en"}],
    "/bulk/preview": [
        {
            "inbox": "{channel}",
            "template": "order_update|en",
            "recipients": "{number}",
            "var:1": "x",
            "var:2": "y",
        },
        # A template of A's and a CSV with a column it does not take: the refusal must not name its variables.
        {"inbox": "{channel}", "template": "{template}|en", "recipients": "phone_number,zz\n{number},1"},
    ],
    "/bulk": [
        {
            "inbox": "{channel}",
            "template": "order_update|en",
            "recipients": "{number}",
            "var:1": "x",
            "var:2": "y",
        },
        {"inbox": "{channel}", "template": "{template}|en", "recipients": "phone_number,zz\n{number},1"},
    ],
    "/settings/api-keys": [{"name": "isob-walk key", "user_id": "{user}"}],
    "/settings/api-keys/{key_id}/revoke": [{}],
    "/settings/inboxes/{channel_id}/members": [{"user_id": "{user}"}],
    "/settings/inboxes/{channel_id}/members/{user_id}/remove": [{}],
    "/settings/templates/sync": [{"channel_id": "{channel}"}],
    "/settings/integrations/webhooks": [{"url": "{receiver}/isob-hook", "event:message_updated": "on"}],
    "/settings/integrations/webhooks/{webhook_id}/edit": [
        {"url": "{receiver}/isob-hook", "event:message_updated": "on"}
    ],
    "/settings/integrations/webhooks/{webhook_id}/enabled": [{"enabled": "false"}],
    "/settings/integrations/webhooks/{webhook_id}/delete": [{}],
    "/settings/integrations/webhooks/{webhook_id}/test": [{}],
    "/settings/integrations/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver": [{}],
}
# Kinds that take the walker's own values too, in forms and paths: B's inbox with A's user, A's inbox
# with B's user.
CROSS = {"channel", "user"}


def own_users(gateway: Gateway, actor: Actor) -> list[str]:
    rows = sql(gateway.database_url, "SELECT id FROM users WHERE email = :e", e=actor.email)
    return [str(rows[0][0])]


def walk_dashboard(walk: Walk, routes: list[PageRoute], client: httpx.Client, receiver_url: str) -> None:
    home = client.get("/conversations")
    assert home.status_code == 200, f"{walk.actor.name} is signed in: {home.status_code}"
    token = csrf_of(home.text)
    for route in routes:
        if route.path == "/live":
            continue
        walk.covered.add((route.method, route.path))
        path_names = re.findall(r"\{(\w+)(?::\w+)?\}", route.path)
        unknown = [p for p in path_names if p not in PATH_KINDS]
        if unknown:
            walk.failures.append(
                f"WALK {route.method} {route.path}: no values for {unknown}: teach PATH_KINDS"
            )
            continue
        kinds = [PATH_KINDS[p] for p in path_names]
        if route.path.endswith("/deliveries/{delivery_id}/redeliver"):
            fillings = [
                ({"webhook": pair.split("/")[0], "delivery": pair.split("/")[1]}, True)
                for pair in walk.foreign("webhook_delivery")
            ]
        else:
            fillings = list(walk_combinations(kinds, walk))
        if not kinds:
            fillings = [({}, False)]
        if route.method == "GET":
            for values, path_foreign in fillings:
                path = fill(route.path, path_names, kinds, values)
                queries: list[tuple[dict[str, str], bool]] = [({}, False)]
                for q in route.query:
                    for part in QUERY_PARTS.get(q, ()):
                        queries.append(({q: part}, False))
                    for kind in QUERY_KINDS.get(q, ()):
                        for value in walk.foreign(kind)[:3]:
                            queries.append(({q: value}, True))
                for query, query_foreign in queries:
                    answer = call(
                        walk, client, "GET", path, params=query, headers={"sec-fetch-dest": "document"}
                    )
                    if answer is None:
                        continue
                    where = f"PAGE GET {path}?{urlencode(query)}"
                    judge(
                        walk,
                        where,
                        answer,
                        f"{path}?{urlencode(query)}",
                        "GET",
                        path_foreign,
                        query_foreign,
                        False,
                    )
                    if walk.probes and (path_foreign or query_foreign):
                        twin_path = fill(route.path, path_names, kinds, walk.twin(values))
                        twin = call(
                            walk,
                            client,
                            "GET",
                            twin_path,
                            params=walk.twin_query(query),
                            headers={"sec-fetch-dest": "document"},
                        )
                        walk.compare(where, answer, twin, api=False)
            continue
        forms = FORMS.get(route.path)
        if forms is None:
            walk.failures.append(f"WALK {route.method} {route.path}: no form for it in FORMS: teach the walk")
            continue
        for form in forms:
            form_kinds = sorted(placeholders(form) - {"receiver"} - set(kinds))
            every = kinds + form_kinds
            if route.path.endswith("/deliveries/{delivery_id}/redeliver"):
                combos = fillings
            else:
                # The walker's own inbox or user beside A's user or inbox: only where a user is named.
                combos = list(walk_combinations(every, walk, cross="user" in every)) if every else fillings
            for values, foreign in combos:
                path = fill(route.path, path_names, kinds, values)
                data = expand(form, {**values, "receiver": receiver_url})
                data = {k: str(v) for k, v in data.items()}
                answer = call(walk, client, "POST", path, data={**data, "csrf_token": token})
                if answer is None:
                    continue
                where = f"FORM POST {path} {data}"
                judge(walk, where, answer, f"{path} {urlencode(data)}", "POST", foreign, False, False)
                if walk.probes and foreign:
                    unknown = walk.twin(values)
                    twin_data = {
                        k: str(v) for k, v in expand(form, {**unknown, "receiver": receiver_url}).items()
                    }
                    twin = call(
                        walk,
                        client,
                        "POST",
                        fill(route.path, path_names, kinds, unknown),
                        data={**twin_data, "csrf_token": token},
                    )
                    walk.compare(where, answer, twin, api=False)
                if answer.status_code == 403 and "security token" in answer.text:
                    walk.failures.append(
                        f"CSRF {where}: refused for its token, not for A's object: fix the walk"
                    )


def walk_combinations(
    kinds: list[str], walk: Walk, *, cross: bool = False
) -> Iterator[tuple[dict[str, str], bool]]:
    """Each filling of `kinds` with A's values that holds at least one of them; with `cross`, the
    walker's own inbox and user also stand beside A's (B's inbox with A's user and the reverse)."""
    choices = []
    for kind in kinds:
        options = [(v, True) for v in walk.foreign(kind)]
        if cross and kind in CROSS and walk.actor.account == "globex":
            own = walk.own(kind) if kind == "channel" else own_users(walk.gateway, walk.actor)
            options += [(v, False) for v in own]
        choices.append(options)
    for combo in itertools.product(*choices):
        if any(f for _, f in combo):
            yield {k: v for k, (v, _) in zip(kinds, combo, strict=True)}, True


def fill(path: str, names: list[str], kinds: list[str], values: dict[str, str]) -> str:
    for name, kind in zip(names, kinds, strict=True):
        path = re.sub(r"\{" + name + r"(?::\w+)?\}", values[kind], path)
    return path


# --- the control -----------------------------------------------------------------------------------


def walk_dashboard_control(walk: Walk, routes: list[PageRoute], client: httpx.Client) -> None:
    for route in routes:
        if route.method != "GET" or route.path == "/live":
            continue
        path_names = re.findall(r"\{(\w+)(?::\w+)?\}", route.path)
        kinds = [PATH_KINDS[p] for p in path_names if p in PATH_KINDS]
        choices = [walk.a.values(k, ["main", "second", "admin"]) for k in kinds]
        for combo in itertools.product(*choices):
            path = fill(route.path, path_names, kinds, dict(zip(kinds, combo, strict=True)))
            answer = call(walk, client, "GET", path, headers={"sec-fetch-dest": "document"})
            if answer is None:
                continue
            judge(walk, f"PAGE GET {path}", answer, "", "GET", False, False, False)


# --- the live stream ---------------------------------------------------------------------------------


def read_live(client: httpx.Client, ready: threading.Event, stop: threading.Event, out: list[str]) -> None:
    """What `/live` sends until `stop` (a bounded read of an endless stream: the first chunk after
    `stop` ends it; 30 s of silence too)."""
    try:
        with client.stream("GET", "/live", timeout=httpx.Timeout(10, read=30)) as stream:
            for chunk in stream.iter_text():
                if stop.is_set():
                    break
                out.append(chunk)
                if "event: ready" in "".join(out):
                    ready.set()
    except httpx.ReadTimeout:
        pass
    finally:
        ready.set()


def live_changes(text: str) -> list[dict[str, Any]]:
    """The `change` events of a server-sent event stream, parsed."""
    changes = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        lines = block.strip().splitlines()
        if "event: change" in lines:
            data = "".join(line.removeprefix("data:").strip() for line in lines if line.startswith("data:"))
            changes.append(json.loads(data))
    return changes


def walk_live(
    gateway: Gateway, a: AccountA, walks: list[Walk], sessions: dict[str, httpx.Client]
) -> dict[str, list[dict[str, Any]]]:
    """Every walker (and the control) listens on `/live` while A's customers write to both inboxes;
    each hears only its own inboxes' conversations and is shown no marker it may not see."""
    outs: dict[str, list[str]] = {w.actor.name: [] for w in walks}
    readies = {w.actor.name: threading.Event() for w in walks}
    stop = threading.Event()
    threads = [
        threading.Thread(
            target=read_live,
            args=(sessions[w.actor.name], readies[w.actor.name], stop, outs[w.actor.name]),
            daemon=True,
        )
        for w in walks
    ]
    for thread in threads:
        thread.start()
    for name, ready in readies.items():
        assert ready.wait(10), f"{name}'s live stream opened"
    tag = secrets.token_hex(3)
    for scope, channel in (("main", MAIN), ("second", SECOND)):
        writer = a.values("number", [scope])[0]
        text = a.mark(f"isoa{scope}{tag}-live-text", scope, f"{scope}'s customer message while streaming")
        gateway.sim.inbound(channel["phone_number_id"], writer, text)
    # Until A's administrator heard both inboxes (every stream is told at the same moment), and a second.
    control = next(w.actor.name for w in walks if w.actor is CONTROL)
    both = {str(gateway.ids["main"]), str(gateway.ids["second"])}
    wait_for(
        lambda: both <= {str(c.get("channel_id")) for c in live_changes("".join(outs[control]))},
        timeout=20,
        what="A's administrator to hear both inboxes on /live",
    )
    time.sleep(1.0)
    stop.set()
    # Wake every stream so that it reads `stop`: a customer writes to each inbox, B's included.
    for channel, number in (
        (GLOBEX, new_number()),
        (MAIN, a.values("number", ["main"])[0]),
        (SECOND, a.values("number", ["second"])[0]),
    ):
        gateway.sim.inbound(channel["phone_number_id"], number, "isob wake up")
    for thread in threads:
        thread.join(35)
    heard: dict[str, list[dict[str, Any]]] = {}
    for walk in walks:
        text = "".join(outs[walk.actor.name])
        walk.counts[walk.actor.name] += 1
        walk.covered.add(("GET", "/live"))
        changes = live_changes(text)
        heard[walk.actor.name] = changes
        for change in changes:
            conversation = str(change.get("conversation_id"))
            channel = str(change.get("channel_id"))
            if conversation in walk.foreign("conversation") or channel in walk.foreign("channel"):
                walk.failures.append(f"LEAK GET /live: {walk.actor.name} heard of A's conversation: {change}")
        for marker, (scope, what) in a.markers.items():
            if marker in text and scope in walk.actor.forbidden_scopes:
                walk.failures.append(f"LEAK GET /live: {walk.actor.name} was shown {what} ({marker!r})")
    return heard
