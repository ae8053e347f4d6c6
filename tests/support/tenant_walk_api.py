"""The tenant-isolation walk's API walkers (tests/test_tenant_isolation.py): each walker calls every
operation of `/openapi.json` with account A's values; A's administrator calls them first, the control.

- `walk_api`: every operation with A's ids in the path, the query, the `Idempotency-Key` header and
  the body (`BODIES`, or the operation's OpenAPI examples with A's values put in), each answer judged
  and, for a walker of another account, compared with the answer for an id nobody has.
- `walk_customers`: A's customers seen from the walker's own inbox (dry-run sends).
- `walk_lists_again`: the walker's own lists and pages read again after every walker's attempts.
- `check_usage`: the walker's usage counts exactly the messages it may list.
- `walk_api_control`: A's administrator GETs every operation: the markers are where the walk looks.
- `check_events`: B's webhooks hear nothing of A's.

The routes given are the ones to walk: the test leaves out its `NOT_WALKED`.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import secrets
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import httpx

from support.harness import OTHER_TOKEN, Gateway, new_number, wait_for
from support.receiver import Receiver
from support.tenant_accounts import AccountA
from support.tenant_walk import (
    PATH_KINDS,
    QUERY_KINDS,
    PageRoute,
    Walk,
    call,
    combinations,
    expand,
    judge,
    operations,
    placeholders,
)

# Request bodies per operationId, with `{kind}` placeholders; an operation not listed here is walked
# with the examples its OpenAPI gives, A's values put in (`example_bodies`).
BODIES: dict[str, list[Any]] = {
    "send_message": [
        {"channel_id": "{channel}", "phone_number": "{number}", "text": "isob-walk text"},
        {
            "channel_id": "{channel}",
            "phone_number": "{number}",
            "template": {"name": "otp_code", "language": "en", "parameters": ["123456"]},
        },
    ],
    "send_bulk_messages": [
        {
            "channel_id": "{channel}",
            "template": {"name": "order_update", "language": "en"},
            "recipients": [{"phone_number": "{number}", "parameters": ["isob-1", "shipped"]}],
        }
    ],
    "create_webhook": [{"url": "{receiver}/isob-hook", "events": ["message_updated"]}],
    "update_webhook": [{"url": "{receiver}/isob-hook", "events": ["message_updated"], "enabled": False}],
}


def example_bodies(op: dict[str, Any]) -> list[Any]:
    content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
    examples = [e["value"] for e in content.get("examples", {}).values()]
    if "example" in content:
        examples.append(content["example"])

    def put_in(value: Any) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k == "channel_id":
                    out[k] = "{channel}"
                elif k == "phone_number":
                    out[k] = "{number}"
                elif k == "phone_numbers":
                    out[k] = ["{number}"]
                elif k == "url":
                    out[k] = "{receiver}/isob-example"
                else:
                    out[k] = put_in(v)
            return out
        if isinstance(value, list):
            return [put_in(v) for v in value]
        return value

    return [put_in(copy.deepcopy(e)) for e in examples]


def walk_api(walk: Walk, spec: dict[str, Any], receiver_url: str) -> None:
    """Every operation of the spec, with A's ids wherever a parameter or a body field takes one."""
    http, gateway = walk.gateway.http, walk.gateway
    headers = {"Authorization": f"Bearer {walk.actor.token}"}
    for method, path, op in operations(spec):
        name = op.get("operationId", f"{method} {path}")
        walk.covered.add(("API", name))
        params = op.get("parameters", [])
        path_names = [p["name"] for p in params if p["in"] == "path"]
        unknown = [p for p in path_names if p not in PATH_KINDS]
        if unknown:
            walk.failures.append(f"WALK {name}: no values for path parameters {unknown}: teach PATH_KINDS")
            continue
        kinds = [PATH_KINDS[p] for p in path_names]
        required_query = [p["name"] for p in params if p["in"] == "query" and p.get("required")]
        optional_query = [p["name"] for p in params if p["in"] == "query" and not p.get("required")]
        header_names = {p["name"].lower() for p in params if p["in"] == "header"}
        has_body = "requestBody" in op
        bodies = BODIES.get(name) or (example_bodies(op) if has_body else [None])
        if has_body and not bodies:
            walk.failures.append(f"WALK {name}: a body without a BODIES entry or an OpenAPI example")
            continue
        idem_keys = list(walk.foreign("idempotency_key"))
        # Paths: A's object ids (refused), and the walker's own account with no object (its own lists).
        fillings: list[tuple[dict[str, str], bool]] = list(combinations(kinds, walk, with_own=set()))
        if kinds == ["account"]:
            fillings.append(({"account": walk.own("account")[0]}, False))
        for values, path_foreign in fillings:
            url = gateway.url + path
            for p, kind in zip(path_names, kinds, strict=True):
                url = url.replace("{" + p + "}", values[kind])
            queries: list[tuple[dict[str, str], bool]] = []
            base: dict[str, str] = {}
            base_foreign = False
            for q in required_query:
                q_kinds = QUERY_KINDS.get(q)
                own = walk.own(q_kinds[0]) if q_kinds else []
                foreign = walk.foreign(q_kinds[0]) if q_kinds else []
                if not (own or foreign):
                    walk.failures.append(f"WALK {name}: no value for required query parameter {q!r}")
                    break
                # Own values where there are (a question about A's number on the walker's channel).
                base[q] = (own or foreign)[0]
                base_foreign |= not own
            queries.append((base, base_foreign))
            if method == "GET":
                for q in list(required_query) + optional_query:
                    for kind in QUERY_KINDS.get(q, ()):
                        for value in walk.foreign(kind)[:3]:
                            queries.append(({**base, q: value}, True))
            for query, query_foreign in queries:
                for body_template in bodies:
                    for body_values, body_foreign in body_fillings(body_template, walk, receiver_url):
                        body = expand(body_template, body_values) if body_template is not None else None
                        extra = {}
                        idem_foreign = False
                        if idem_keys and "idempotency-key" in header_names:
                            # A's idempotency keys, one request each (the key is the caller's scope).
                            extra["Idempotency-Key"] = idem_keys.pop()
                            idem_foreign = True
                        foreign = path_foreign or body_foreign
                        answer = call(
                            walk, http, method, url, params=query, json=body, headers={**headers, **extra}
                        )
                        if answer is None:
                            continue
                        sent = f"{url}?{urlencode(query)} {json.dumps(body)} {extra}"
                        where = f"API {name} {method} {url}?{urlencode(query)} body={json.dumps(body)}"
                        judge(walk, where, answer, sent, method, foreign, query_foreign or idem_foreign, True)
                        if name == "check_window" and answer.status_code == 200:
                            # The walk asks only about A's customers: none wrote to the walker's inboxes.
                            window = answer.json()
                            if window["open"] or window["last_customer_message_at"] is not None:
                                walk.failures.append(
                                    f"LEAK {where}: {walk.actor.name} sees A's window: {window}"
                                )
                        if walk.probes and (foreign or query_foreign):
                            unknown = walk.twin({**values, **body_values})
                            twin_url = gateway.url + path
                            for p, kind in zip(path_names, kinds, strict=True):
                                twin_url = twin_url.replace("{" + p + "}", unknown[kind])
                            twin_body = expand(body_template, unknown) if body_template is not None else None
                            twin = call(
                                walk,
                                http,
                                method,
                                twin_url,
                                params=walk.twin_query(query),
                                json=twin_body,
                                headers={**headers, **extra},
                            )
                            walk.compare(where, answer, twin, api=True)


def walk_lists_again(walk: Walk, spec: dict[str, Any], routes: list[PageRoute], client: httpx.Client) -> None:
    """After every walker's attempts: the walker's own lists and pages, read again. What a refused
    attempt left behind (an audit entry, a failed send, a batch) must not carry A's data either."""
    headers = {"Authorization": f"Bearer {walk.actor.token}"}
    account = walk.own("account")[0]
    for method, path, op in operations(spec):
        if method != "GET" or re.findall(r"\{(\w+)\}", path) != ["account_id"]:
            continue
        if any(p["in"] == "query" and p.get("required") for p in op.get("parameters", [])):
            continue
        url = walk.gateway.url + path.replace("{account_id}", account)
        answer = call(walk, walk.gateway.http, "GET", url, headers=headers)
        if answer is not None:
            judge(
                walk, f"API {op.get('operationId')} GET {url} (again)", answer, "", "GET", False, True, True
            )
    for route in routes:
        if route.method != "GET" or "{" in route.path:
            continue
        if route.path == "/live":
            continue
        answer = call(walk, client, "GET", route.path, headers={"sec-fetch-dest": "document"})
        if answer is not None:
            judge(walk, f"PAGE GET {route.path} (again)", answer, "", "GET", False, True, False)


def check_usage(walk: Walk) -> None:
    """The walker's usage counts exactly the messages it may list (its inboxes' in its account): none
    of A's (or of the other inbox's) is summed in, which no marker would show."""
    http, headers = walk.gateway.http, {"Authorization": f"Bearer {walk.actor.token}"}
    base = f"{walk.gateway.url}/v1/accounts/{walk.own('account')[0]}"
    listed: list[str] = []
    query: dict[str, str] = {"limit": "200"}
    while True:
        page = call(walk, http, "GET", f"{base}/whatsapp/messages", params=query, headers=headers)
        assert page is not None and page.status_code == 200, f"{walk.actor.name} lists its messages"
        listed += [m["id"] for m in page.json()["data"]]
        if not page.json()["next_before"]:
            break
        query["before"] = page.json()["next_before"]
    usage = call(walk, http, "GET", f"{base}/usage", headers=headers)
    assert usage is not None and usage.status_code == 200, f"{walk.actor.name} reads its usage"
    counted = usage.json()["total"]["messages"]
    if counted != len(listed):
        walk.failures.append(
            f"USAGE {walk.actor.name}: usage counts {counted} messages, the walker may list {len(listed)}"
        )


def walk_customers(walk: Walk) -> None:
    """A's customers as seen from the walker's own inbox: a number that wrote only to A has no open
    window there, and A's business-scoped user ids name no one in the walker's account (a dry run
    tells, storing nothing)."""
    http, gateway = walk.gateway.http, walk.gateway
    url = f"{gateway.url}/v1/accounts/{walk.own('account')[0]}/whatsapp/messages"
    headers = {"Authorization": f"Bearer {walk.actor.token}"}
    channel = int(walk.own("channel")[0])
    bodies = [
        {"channel_id": channel, "phone_number": number, "text": "isob-walk text"}
        for number in walk.foreign("number")[:3]
    ]
    bodies += [
        {
            "channel_id": channel,
            "user_id": user_id,
            "template": {"name": "order_update", "language": "en", "parameters": ["isob-1", "shipped"]},
        }
        for user_id in walk.foreign("user_id_bsuid")
        # Within one account a user id names the account's customer whatever inbox learnt it (contacts
        # are the account's, API.md section 13), so an agent who knows one learns its number: not
        # walked for A's agents (docs/security.md, "what the walk found").
        if walk.probes
    ]
    for body in bodies:
        answer = call(walk, http, "POST", url, params={"dry_run": "true"}, json=body, headers=headers)
        if answer is None:
            continue
        where = f"API send_message (dry run) POST {url}?dry_run=true body={json.dumps(body)}"
        judge(walk, where, answer, json.dumps(body), "GET", False, True, True)
        if "text" in body and answer.status_code != 422:
            walk.failures.append(
                f"LEAK {where}: {walk.actor.name} may write to A's customer: HTTP {answer.status_code}"
            )
        if answer.status_code == 200 and answer.json().get("window", {}).get("open"):
            walk.failures.append(f"LEAK {where}: {walk.actor.name} sees A's customer's window open")


def body_fillings(body_template: Any, walk: Walk, receiver_url: str) -> Iterator[tuple[dict[str, str], bool]]:
    if body_template is None:
        yield {}, False
        return
    kinds = sorted(placeholders(body_template) - {"receiver"})
    if not kinds:
        yield {"receiver": receiver_url}, False
        return
    for values, foreign in combinations(kinds, walk, with_own=set()):
        yield {**values, "receiver": receiver_url}, foreign


# --- the control -----------------------------------------------------------------------------------


def walk_api_control(walk: Walk, spec: dict[str, Any]) -> None:
    """A's administrator GETs every operation with A's ids: the markers are where the walk looks."""
    http, gateway = walk.gateway.http, walk.gateway
    headers = {"Authorization": f"Bearer {walk.actor.token}"}
    for method, path, op in operations(spec):
        if method != "GET":
            continue
        params = op.get("parameters", [])
        path_names = [p["name"] for p in params if p["in"] == "path"]
        kinds = [PATH_KINDS[p] for p in path_names if p in PATH_KINDS]
        query = {}
        for p in params:
            if p["in"] == "query" and p.get("required"):
                query[p["name"]] = walk.a.values(QUERY_KINDS[p["name"]][0], ["main"])[0]
        choices = [
            [str(gateway.ids["acme"])] if k == "account" else walk.a.values(k, ["main", "second", "admin"])
            for k in kinds
        ]
        for combo in itertools.product(*choices):
            url = gateway.url + path
            for p, value in zip(path_names, combo, strict=True):
                url = url.replace("{" + p + "}", value)
            extra = {"limit": "200"} if any(p["name"] == "limit" for p in params) else {}
            answer = call(walk, http, "GET", url, params={**query, **extra}, headers=headers)
            if answer is None:
                continue
            judge(walk, f"API {op.get('operationId')} GET {url}", answer, "", "GET", False, False, True)


# --- the account webhooks --------------------------------------------------------------------------


def check_events(gateway: Gateway, a: AccountA, receiver: Receiver, failures: list[str]) -> int:
    """B's webhooks (made by B's walkers, legitimately, at `/isob-*`) hear B's messages and nothing
    of A's: A sends one more OTP once they exist, and A's own webhook hears it. Returns the posts read."""
    code = a.mark(
        "94" + "".join(secrets.choice("0123456789") for _ in range(8)), "main", "an OTP code sent last"
    )
    ours = gateway.send(
        {
            "phone_number": new_number(),
            "template": {"name": "otp_code", "language": "en", "parameters": [code]},
        }
    )
    assert ours.status_code == 201, ours.text
    a.mark(ours.json()["id"], "main", "the id of an OTP sent last")
    theirs = gateway.http.post(
        gateway.v1("/whatsapp/messages", gateway.ids["globex"]),
        json={
            "channel_id": gateway.ids["globex_channel"],
            "phone_number": new_number(),
            "template": {"name": "otp_code", "language": "en", "parameters": ["123456"]},
        },
        headers=gateway.headers(OTHER_TOKEN),
    )
    assert theirs.status_code == 201, theirs.text
    hook = next(m for m, v in a.markers.items() if v[1] == "A's webhook URL").rsplit("/", 1)[1]
    wait_for(
        lambda: any(ours.json()["id"] in r.body.decode() for r in receiver.received(hook)),
        what="A's webhook to hear A's last OTP",
    )
    wait_for(
        lambda: any(theirs.json()["id"] in r.body.decode() for r in receiver.received("isob-hook")),
        what="B's webhook to hear B's OTP",
    )
    posts = [r for path in ("isob-hook", "isob-example") for r in receiver.received(path)]
    for post in posts:
        body = post.body.decode()
        for marker, (_, what) in a.markers.items():
            if marker in body:
                failures.append(f"LEAK webhook /{post.path}: B's webhook was posted {what} ({marker!r})")
    return len(posts)
