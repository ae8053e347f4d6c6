"""Tenant isolation (issue 14 point 5): every operation of the running app's `/openapi.json` and every
dashboard route, walked with another account's key and session and with an agent of another inbox, on
both databases.

Account A (Acme) is filled with data of every kind, each carrying marker strings (texts, customer
numbers, message and batch ids, wamids, webhook and callback URLs, key names, secrets). Then:

- B (Globex)'s administrator and agent, and each of A's agents (a member of one inbox only) call every
  API operation with A's ids in the path, the query, the headers and the body. Each answer is a refusal
  with the contract's error body (403 `forbidden` / `administrator_required`, 404 `*_not_found`), or,
  where the request is the caller's own (a list of its own account), carries none of the markers it may
  not see; and no request acts on A: A's rows and what the simulator was sent are the same afterwards.
- The same users, signed in, GET every dashboard page (A's ids in paths and queries, the htmx parts,
  the CSV downloads) and POST every form with their own session's CSRF token, and read the live stream
  while A's customers write.
- A's administrator walks the same pages and operations first (the control): every marker shows up
  somewhere, so a walk that sees none has looked in the right places.

The routes are read from the app at run time: an operation or page added later is walked, or, if the
walk cannot fill its parameters, fails the test by name.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from fastapi import FastAPI

from support.app_in_thread import gateway_with_app, sql
from support.harness import (
    ADMIN_TOKEN,
    AGENT_TOKEN,
    GLOBEX,
    MAIN,
    OTHER_TOKEN,
    OUTSIDER_TOKEN,
    SECOND,
    Gateway,
    Simulator,
    new_number,
    post_login,
    provision_file,
    wait_for,
)
from support.receiver import Receiver

GLOBEX_AGENT_TOKEN = "wg_test_agent_token_globex_02"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')

# Routes outside the walk, each with its reason. Anything else the app serves is walked.
NOT_WALKED = {
    ("GET", "/static"): "the dashboard's own CSS/JS files: no account data",
    ("GET", "/login"): "the sign-in form, served before any session: no account data",
    ("POST", "/login"): "signing in takes no ids; its rules are tests/dashboard/test_sign_in.py's",
    ("POST", "/logout"): "ends the walker's own session and takes no ids",
    ("GET", "/webhooks/whatsapp"): "Meta's verification handshake: a token of the deployment, no account",
    ("POST", "/webhooks/whatsapp"): "Meta's receiver: authenticated by Meta's signature, not by an account",
}

# Query parameters the walk fills with A's values, by name (API and dashboard alike).
QUERY_KINDS: dict[str, tuple[str, ...]] = {
    "channel_id": ("channel",),
    "inbox": ("channel",),
    "channel": ("channel",),
    "batch_id": ("batch",),
    "phone_number": ("number",),
    "number": ("number",),
    "q": ("number", "text"),
    "before": ("message", "batch", "delivery", "conversation_cursor", "key"),
    "after": ("channel", "key"),
    "webhook_id": ("webhook",),
    "message_id": ("message",),
    "conversation_id": ("conversation",),
    "name": ("template",),
    "template": ("template",),
    "user_id": ("user",),
    "key_id": ("key",),
}
# Query parameters that choose a part of a page (htmx fragments): walked with each of these values.
QUERY_PARTS: dict[str, tuple[str, ...]] = {
    "part": ("messages", "state", "sync", "list"),
    "fragment": ("true",),
}
PATH_KINDS: dict[str, str] = {
    "account_id": "account",
    "channel_id": "channel",
    "message_id": "message",
    "batch_id": "batch",
    "webhook_id": "webhook",
    "delivery_id": "delivery",
    "conversation_id": "conversation",
    "key_id": "key",
    "user_id": "user",
}
# Refusals a request about another tenant's (or inbox's) object may get.
REFUSALS = {403: {"forbidden", "administrator_required"}, 404: None}  # None: any `*not_found` code


# --- the two accounts ------------------------------------------------------------------------------


def isolation_spec() -> dict[str, Any]:
    """The tests' usual two accounts; B (Globex) also gets an agent with a key, a member of its inbox."""
    spec = provision_file()
    globex = spec["accounts"][1]
    globex["users"].append(
        {"email": "agent@globex.test", "name": "Globex Agent", "role": "agent", "password": "pw-gagent"}
    )
    globex["api_keys"].append({"user": "agent@globex.test", "name": "gx-agent", "token": GLOBEX_AGENT_TOKEN})
    globex["channels"][0]["members"].append("agent@globex.test")
    return spec


@dataclass
class Actor:
    """Someone who walks: an API key and a dashboard user of one account, and what they may not see."""

    name: str
    token: str
    email: str
    password: str
    account: str  # "acme" or "globex"
    forbidden_scopes: frozenset[str]  # marker scopes this user must never be shown
    own_channels: tuple[str, ...]  # gateway.ids keys of the inboxes the user is a member of


ACTORS = [
    Actor(
        "B's administrator",
        OTHER_TOKEN,
        "boss@globex.test",
        "pw-boss",
        "globex",
        frozenset({"main", "second", "admin", "account", "secret"}),
        ("globex_channel",),
    ),
    Actor(
        "B's agent",
        GLOBEX_AGENT_TOKEN,
        "agent@globex.test",
        "pw-gagent",
        "globex",
        frozenset({"main", "second", "admin", "account", "secret"}),
        ("globex_channel",),
    ),
    Actor(
        "A's agent of Second (not of Main)",
        OUTSIDER_TOKEN,
        "outsider@acme.test",
        "pw-out",
        "acme",
        frozenset({"main", "admin", "secret"}),
        ("second",),
    ),
    Actor(
        "A's agent of Main (not of Second)",
        AGENT_TOKEN,
        "agent@acme.test",
        "pw-agent",
        "acme",
        frozenset({"second", "admin", "secret"}),
        ("main",),
    ),
]
CONTROL = Actor(
    "A's administrator (control)",
    ADMIN_TOKEN,
    "admin@acme.test",
    "pw-admin",
    "acme",
    frozenset({"secret"}),
    ("main", "second"),
)


@dataclass
class AccountA:
    """A's data: markers (text -> (scope, what it is)) and ids by kind and scope."""

    markers: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Markers stored but not shown even to A's administrator (the control does not look for them).
    unshown: set[str] = field(default_factory=set)
    # kind -> scope -> values: kinds of PATH_KINDS / QUERY_KINDS; scopes "main", "second", "admin".
    ids: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def mark(self, marker: str, scope: str, what: str, *, shown: bool = True) -> str:
        assert len(marker) >= 8, f"a marker of {len(marker)} characters would match by chance: {marker!r}"
        self.markers[marker] = (scope, what)
        if not shown or scope == "secret":
            self.unshown.add(marker)
        return marker

    def add(self, kind: str, scope: str, value: object) -> None:
        values = self.ids.setdefault(kind, {}).setdefault(scope, [])
        if str(value) not in values:
            values.append(str(value))

    def values(self, kind: str, scopes: Iterable[str]) -> list[str]:
        by_scope = self.ids.get(kind, {})
        return [v for scope in sorted(scopes) for v in by_scope.get(scope, [])]


def digits(number: str) -> str:
    return number.lstrip("+")


def make_account_a(gateway: Gateway, receiver: Receiver, admin_session: httpx.Client) -> AccountA:
    """Fill account A with data of every kind, through the API, the simulator and the dashboard."""
    a = AccountA()
    tag = secrets.token_hex(3)
    http, sim = gateway.http, gateway.sim
    hook_url = receiver.url(f"isoa-hook-{tag}")
    webhook = http.post(
        gateway.v1("/webhooks"),
        json={"url": hook_url, "events": ["message_updated"]},
        headers=gateway.headers(ADMIN_TOKEN),
    )
    assert webhook.status_code == 201, webhook.text
    a.mark(hook_url.split("//", 1)[1], "admin", "A's webhook URL")
    a.mark(webhook.json()["secret"], "secret", "A's webhook signing secret")
    a.add("webhook", "admin", webhook.json()["id"])

    # A template of Main's own (the seed templates are the same in every WABA): name, text, variable.
    name = a.mark(f"isoa_tpl_{tag}", "main", "the name of a template of Main's")
    variable = a.mark(f"isoavar_{tag}", "main", "a variable of a template of Main's")
    text = a.mark(f"Isoa confidential offer {tag}", "main", "the text of a template of Main's")
    a.add("template", "main", name)
    seeded = sim.http.get(f"{sim.url}/_sim/templates/{MAIN['waba_id']}").json()["data"]
    own = {
        "name": name,
        "language": "en",
        "status": "APPROVED",
        "category": "UTILITY",
        "parameter_format": "NAMED",
        "components": [
            {
                "type": "BODY",
                "text": f"{text} for {{{{{variable}}}}}",
                "example": {"body_text_named_params": [{"param_name": variable, "example": "x"}]},
            }
        ],
    }
    sim.http.put(
        f"{sim.url}/_sim/templates/{MAIN['waba_id']}", json={"data": [*seeded, own]}
    ).raise_for_status()
    page = admin_session.get("/settings/templates")
    synced = admin_session.post(
        "/settings/templates/sync",
        data={"channel_id": str(gateway.ids["main"]), "csrf_token": csrf_of(page.text)},
    )
    assert synced.status_code == 303, synced.text[:300]
    wait_for(
        lambda: http.get(
            gateway.v1("/whatsapp/templates"), params={"name": name}, headers=gateway.headers()
        ).json()["data"],
        what="Main's own template synced",
    )

    for scope, channel in (("main", MAIN), ("second", SECOND)):
        channel_id = gateway.ids[scope]
        a.add("channel", scope, channel_id)
        a.mark(channel["display_phone_number"], scope, f"{scope}'s phone number")
        a.mark(channel["phone_number_id"], scope, f"{scope}'s phone_number_id")
        a.mark(f"EAAG-test-{scope.capitalize()}", "secret", f"{scope}'s access token")
        prefix = f"isoa{scope}{tag}"
        # A customer writes: a conversation, an open window, a wamid, a business-scoped user id.
        writer = new_number()
        a.add("number", scope, writer)
        a.mark(digits(writer), scope, f"{scope}'s customer number (inbound)")
        inbound = sim.http.post(
            f"{sim.url}/_sim/inbound",
            json={
                "phone_number_id": channel["phone_number_id"],
                "from": writer,
                "text": a.mark(f"{prefix}-inbound-text", scope, f"{scope}'s customer message"),
                "name": a.mark(f"Isoa{scope}{tag} Customer", scope, f"{scope}'s customer name"),
            },
        )
        inbound.raise_for_status()
        a.mark(inbound.json()["wamid"], scope, f"{scope}'s inbound wamid", shown=False)
        a.add("text", scope, f"Isoa{scope}{tag}")  # a search for the customer's name
        a.add("user_id_bsuid", scope, inbound.json()["user_id"])
        window = gateway.v1("/whatsapp/messages/window")
        asked = {"channel_id": channel_id, "phone_number": writer}
        wait_for(
            lambda asked=asked, at=window: http.get(at, params=asked, headers=gateway.headers()).json()[
                "open"
            ],
            what=f"{scope}'s customer window to open",
        )
        # A reply in the window, with a status_callback.
        reply = gateway.send(
            {
                "channel_id": channel_id,
                "phone_number": writer,
                "text": a.mark(f"{prefix}-reply-text", scope, f"{scope}'s reply text"),
                "status_callback": {
                    "url": receiver.url(
                        a.mark(f"isoa-cb-{scope}-{tag}", scope, "a status_callback URL", shown=False)
                    ),
                    "secret": a.mark(f"isoa-cbsecret-{scope}-{tag}", "secret", "a status_callback secret"),
                },
            }
        )
        assert reply.status_code == 201, reply.text
        a.add("message", scope, a.mark(reply.json()["id"], scope, f"{scope}'s reply id"))
        # An OTP to another number, with an idempotency key.
        otp_to = new_number()
        a.add("number", scope, otp_to)
        a.mark(digits(otp_to), scope, f"{scope}'s OTP number")
        code = "93" + "".join(secrets.choice("0123456789") for _ in range(8))
        a.mark(code, scope, f"{scope}'s OTP code")
        idem = a.mark(f"isoa-idem-{scope}-{tag}", "admin", "an idempotency key of A's", shown=False)
        a.add("idempotency_key", scope, idem)
        otp = gateway.send(
            {
                "channel_id": channel_id,
                "phone_number": otp_to,
                "template": {"name": "otp_code", "language": "en", "parameters": [code]},
            },
            **{"Idempotency-Key": idem},
        )
        assert otp.status_code == 201, otp.text
        a.add("message", scope, a.mark(otp.json()["id"], scope, f"{scope}'s OTP id"))
        # A batch of two.
        bulk_to = [new_number(), new_number()]
        order = a.mark(f"isoa-order-{scope}-{tag}", scope, f"{scope}'s bulk parameter")
        batch = http.post(
            gateway.v1("/whatsapp/bulk_messages"),
            json={
                "channel_id": channel_id,
                "template": {"name": "order_update", "language": "en"},
                "recipients": [{"phone_number": n, "parameters": [order, "shipped"]} for n in bulk_to],
            },
            headers=gateway.headers(),
        )
        assert batch.status_code == 202, batch.text
        batch_id = a.mark(batch.json()["batch_id"], scope, f"{scope}'s batch id")
        a.add("batch", scope, batch_id)
        for number in bulk_to:
            a.add("number", scope, number)
            a.mark(digits(number), scope, f"{scope}'s bulk recipient")

    # Two API keys made on the dashboard, one revoked.
    for n in range(2):
        page = admin_session.get("/settings/api-keys")
        name = a.mark(f"isoa-key-{n}-{tag}", "admin", "an API key's name")
        created = admin_session.post(
            "/settings/api-keys", data={"name": name, "csrf_token": csrf_of(page.text)}
        )
        assert created.status_code == 200, created.text[:500]
        token = re.search(r"data-secret[^>]*>\s*([^<\s]+)", created.text)
        assert token is not None, "the new key's token is shown in an element with data-secret"
        a.mark(token.group(1), "secret", "an API key's token")
    for token in (ADMIN_TOKEN, AGENT_TOKEN, OUTSIDER_TOKEN):
        a.mark(token, "secret", "an API key's token")
    for key_id, name in sql(
        gateway.database_url, "SELECT id, name FROM api_keys WHERE account_id = :a", a=gateway.ids["acme"]
    ):
        a.add("key", "admin", key_id)
        if name.startswith("isoa-key-1-"):
            revoke = admin_session.post(
                f"/settings/api-keys/{key_id}/revoke", data={"csrf_token": csrf_of(page.text)}
            )
            assert revoke.status_code == 303, revoke.text[:300]
    for user_id, email in sql(
        gateway.database_url, "SELECT id, email FROM users WHERE account_id = :a", a=gateway.ids["acme"]
    ):
        a.add("user", "admin", user_id)
        a.mark(email, "account", "an email of A's users")
    a.mark("Acme Admin", "account", "the name of A's administrator")
    a.add("account", "acme", gateway.ids["acme"])

    # Conversations, and everything settled: statuses, events, deliveries.
    for conversation_id, channel_id in sql(
        gateway.database_url,
        "SELECT id, channel_id FROM conversations WHERE channel_id IN (:m, :s)",
        m=gateway.ids["main"],
        s=gateway.ids["second"],
    ):
        scope = "main" if channel_id == gateway.ids["main"] else "second"
        a.add("conversation", scope, conversation_id)
        a.add("conversation_cursor", scope, f"2099-01-01T00:00:00Z_{conversation_id}")
    settle(gateway)
    for scope in ("main", "second"):
        listed = http.get(
            gateway.v1("/whatsapp/messages"),
            params={"channel_id": gateway.ids[scope], "limit": 200},
            headers=gateway.headers(),
        ).json()["data"]
        for message in listed:
            a.add("message", scope, a.mark(message["id"], scope, f"{scope}'s message id"))
            if message["upstream_message_id"]:
                a.mark(message["upstream_message_id"], scope, f"{scope}'s wamid")
            deliveries = http.get(
                gateway.v1(f"/whatsapp/messages/{message['id']}/deliveries"), headers=gateway.headers()
            )
            for delivery in deliveries.json()["data"]:
                a.add("delivery", scope, delivery["id"])
    for webhook_id in a.values("webhook", ["admin"]):
        listed = http.get(gateway.v1(f"/webhooks/{webhook_id}/deliveries"), headers=gateway.headers())
        assert listed.status_code == 200, listed.text
        for delivery in listed.json()["data"]:
            a.add("delivery", "admin", delivery["id"])
            a.add("webhook_delivery", "admin", f"{webhook_id}/{delivery['id']}")
    assert a.values("webhook_delivery", ["admin"]), "A's webhook has deliveries"
    return a


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found is not None, "the page carries a CSRF token"
    return found.group(1)


# --- A's state, before and after ---------------------------------------------------------------------

VOLATILE = {"last_used_at"}  # a key's last use: A's agents use their own keys during the walk


def snapshot(gateway: Gateway) -> dict[str, Any]:
    """Every row of A's, and what the simulator was asked to send from A's numbers."""
    url = gateway.database_url
    params = {"acme": gateway.ids["acme"], "main": gateway.ids["main"], "second": gateway.ids["second"]}
    queries = {
        "accounts": "SELECT * FROM accounts WHERE id = :acme",
        "users": "SELECT * FROM users WHERE account_id = :acme",
        "api_keys": "SELECT * FROM api_keys WHERE account_id = :acme",
        "channels": "SELECT * FROM channels WHERE account_id = :acme",
        "channel_members": "SELECT * FROM channel_members WHERE channel_id IN (:main, :second)"
        " OR user_id IN (SELECT id FROM users WHERE account_id = :acme)",
        "templates": "SELECT * FROM templates WHERE channel_id IN (:main, :second)",
        "conversations": "SELECT * FROM conversations WHERE channel_id IN (:main, :second)",
        "messages": "SELECT * FROM messages WHERE channel_id IN (:main, :second)",
        "batches": "SELECT * FROM batches WHERE channel_id IN (:main, :second)",
        "batch_recipients": "SELECT * FROM batch_recipients WHERE batch_id IN"
        " (SELECT id FROM batches WHERE channel_id IN (:main, :second))",
        "webhooks": "SELECT * FROM webhooks WHERE account_id = :acme",
        "deliveries": "SELECT * FROM deliveries WHERE account_id = :acme",
        "delivery_attempts": "SELECT * FROM delivery_attempts WHERE delivery_id IN"
        " (SELECT id FROM deliveries WHERE account_id = :acme)",
        "outbox": "SELECT * FROM outbox WHERE account_id = :acme OR channel_id IN (:main, :second)",
        "audit_log": "SELECT * FROM audit_log WHERE account_id = :acme",
    }
    state: dict[str, Any] = {}
    for table, query in queries.items():
        rows = rows_of(url, query, params)
        state[table] = sorted(
            (json.dumps({k: v for k, v in row.items() if k not in VOLATILE}, sort_keys=True, default=str))
            for row in rows
        )
    sent = gateway.sim.messages()
    ours = {MAIN["phone_number_id"], SECOND["phone_number_id"]}
    state["simulator"] = sorted(
        json.dumps(m, sort_keys=True, default=str) for m in sent if m.get("phone_number_id") in ours
    )
    return state


def rows_of(database_url: str, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    from sqlalchemy import NullPool, create_engine, text

    from wagate.core.migrate import sync_url

    engine = create_engine(sync_url(database_url), poolclass=NullPool)
    try:
        with engine.begin() as connection:
            return [dict(row._mapping) for row in connection.execute(text(query), params)]
    finally:
        engine.dispose()


def settle(gateway: Gateway) -> dict[str, Any]:
    """Wait until A's data stops changing (statuses, events, deliveries); return it."""
    previous: dict[str, Any] = {}
    stable = 0

    def still() -> dict[str, Any] | None:
        nonlocal previous
        now = snapshot(gateway)
        pending = any('"state": "pending"' in row for row in now["deliveries"])
        nonlocal stable
        stable = stable + 1 if now == previous and not pending else 0
        previous = now
        return now if stable >= 2 else None

    return wait_for(still, timeout=60, interval=1.0, what="A's data to settle")


# --- the routes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageRoute:
    method: str
    path: str
    query: tuple[str, ...]  # declared query parameter names


def dashboard_routes(app: FastAPI) -> list[PageRoute]:
    """Every (method, path) the app serves outside `/v1`, read from the app: included routers of
    either FastAPI generation (flattened routes, or `_IncludedRouter` branches) and mounts."""
    found: list[PageRoute] = []

    def visit(routes: Iterable[Any], prefix: str) -> None:
        for route in routes:
            original = getattr(route, "original_router", None)
            if original is not None:
                visit(original.routes, prefix + route.include_context.prefix)
                continue
            path = prefix + getattr(route, "path", "")
            if path.startswith("/v1/") or path == "/v1":
                continue
            methods = getattr(route, "methods", None)
            if methods is None:  # a mount: static files
                found.append(PageRoute("GET", path, ()))
                continue
            dependant = getattr(route, "dependant", None)
            query = tuple(p.alias for p in dependant.query_params) if dependant is not None else ()
            for method in sorted(methods - {"HEAD"}):
                found.append(PageRoute(method, path, query))

    visit(app.routes, "")
    return found


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]


# --- the walk ----------------------------------------------------------------------------------------


@dataclass
class Walk:
    """One walker's requests and what the walk found."""

    actor: Actor
    a: AccountA
    gateway: Gateway
    failures: list[str]
    counts: Counter[str]
    seen: set[str] = field(default_factory=set)  # every marker this walker was shown
    covered: set[tuple[str, str]] = field(default_factory=set)
    statuses: Counter[int] = field(default_factory=Counter)

    @property
    def foreign_scopes(self) -> set[str]:
        """Scopes of A's objects this walker must not reach."""
        return {"main", "second", "admin"} & set(self.actor.forbidden_scopes)

    def foreign(self, kind: str) -> list[str]:
        if kind == "account":  # another account's id in the path
            return [str(self.gateway.ids["globex" if self.actor.account == "acme" else "acme"])]
        return self.a.values(kind, self.foreign_scopes)

    def own(self, kind: str) -> list[str]:
        if kind == "account":
            return [str(self.gateway.ids[self.actor.account])]
        if kind == "channel":
            return [str(self.gateway.ids[c]) for c in self.actor.own_channels]
        return []

    def look(self, where: str, answer: httpx.Response, sent: str) -> None:
        """Fail for each marker the answer shows that this walker may not see (unless the request
        itself carried it: a form shown again with what was typed is no leak)."""
        shown = answer.text + " " + answer.headers.get("location", "")
        for marker, (scope, what) in self.a.markers.items():
            if marker in shown and marker not in sent:
                self.seen.add(marker)
                if scope in self.actor.forbidden_scopes:
                    self.failures.append(
                        f"LEAK {where}: {self.actor.name} was shown {what} ({marker!r}),"
                        f" HTTP {answer.status_code}"
                    )

    @property
    def probes(self) -> bool:
        """Whether the walker is of another account: then A's ids must answer as unknown ones do."""
        return self.actor.account != "acme"

    def twin_value(self, value: str, kinds: Iterable[str]) -> str:
        """An id, number or key of the same shape as `value` that nobody has, when `value` is A's
        (one of A's values of these kinds); `value` itself otherwise."""
        if not any(value in self.foreign(kind) for kind in kinds):
            return value
        if value.isdigit():
            return "987654"
        if value.startswith("+"):
            return "+994559999999"
        if "Z_" in value:
            return value.rsplit("_", 1)[0] + "_987654"
        return value[:-6] + "zzzzzz"

    def twin(self, values: dict[str, str]) -> dict[str, str]:
        return {kind: self.twin_value(value, [kind]) for kind, value in values.items()}

    def twin_query(self, query: dict[str, str]) -> dict[str, str]:
        return {q: self.twin_value(v, QUERY_KINDS.get(q, ())) for q, v in query.items()}

    def compare(self, where: str, answer: httpx.Response, twin: httpx.Response | None, *, api: bool) -> None:
        """A's id and an unknown one get the same answer: no one can tell which of A's ids exist."""
        if twin is None:
            return

        def shape(response: httpx.Response) -> tuple[int, str]:
            if not api or response.status_code < 400:
                return response.status_code, ""
            try:
                return response.status_code, str(response.json()["error"]["code"])
            except (ValueError, KeyError, TypeError):
                return response.status_code, "?"

        if shape(answer) != shape(twin):
            self.failures.append(
                f"PROBE {where}: {self.actor.name} tells A's ids from unknown ones: {shape(answer)} for A's,"
                f" {shape(twin)} for {twin.request.method} {twin.request.url}"
            )

    def refused(self, where: str, answer: httpx.Response, *, api: bool) -> bool:
        """Whether the answer is a refusal a foreign object may get; a failure is noted otherwise."""
        if answer.status_code not in REFUSALS:
            self.failures.append(
                f"NOT REFUSED {where}: {self.actor.name} got HTTP {answer.status_code} for A's object"
                f" (expected 403/404): {answer.text[:200]!r}"
            )
            return False
        if api:
            try:
                code = answer.json()["error"]["code"]
            except (ValueError, KeyError, TypeError):
                self.failures.append(
                    f"ERROR BODY {where}: not the contract's error body: {answer.text[:200]!r}"
                )
                return False
            allowed = REFUSALS[answer.status_code]
            if (allowed is not None and code not in allowed) or (allowed is None and "not_found" not in code):
                self.failures.append(f"REFUSAL CODE {where}: HTTP {answer.status_code} with code {code!r}")
                return False
        return True


def call(walk: Walk, client: httpx.Client, method: str, url: str, **kwargs: Any) -> httpx.Response | None:
    """One request of the walk, counted; a broken connection (the app died on it) is a failure."""
    walk.counts[walk.actor.name] += 1
    try:
        answer = client.request(method, url, **kwargs)
        walk.statuses[answer.status_code] += 1
        return answer
    except httpx.TransportError as exc:
        walk.failures.append(
            f"BROKEN {method} {url} {kwargs.get('params') or ''}: {walk.actor.name}: {exc!r}"
        )
        return None


def expand(template: Any, values: dict[str, str]) -> Any:
    """`template` with each `{kind}` placeholder string replaced by its value."""
    if isinstance(template, str):
        for kind, value in values.items():
            if template == "{" + kind + "}":
                return int(value) if kind in ("channel", "user") and value.isdigit() else value
            template = template.replace("{" + kind + "}", value)
        return template
    if isinstance(template, list):
        return [expand(item, values) for item in template]
    if isinstance(template, dict):
        return {k: expand(v, values) for k, v in template.items()}
    return template


def placeholders(template: Any) -> set[str]:
    return set(re.findall(r"\{(\w+)\}", json.dumps(template)))


def combinations(
    kinds: list[str], walk: Walk, *, with_own: set[str]
) -> Iterator[tuple[dict[str, str], bool]]:
    """Each filling of `kinds` with A's values (and the walker's own, for kinds in `with_own`), and
    whether it holds something of A's. Fillings without anything of A's are left out unless no kind
    has a value of A's at all."""
    choices = []
    for kind in kinds:
        foreign = [(v, True) for v in walk.foreign(kind)]
        own = [(v, False) for v in walk.own(kind)] if kind in with_own or kind == "account" else []
        choices.append(foreign + own)
    for combo in itertools.product(*choices):
        is_foreign = any(f for _, f in combo)
        if is_foreign:
            yield {k: v for k, (v, _) in zip(kinds, combo, strict=True)}, True


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
        if route.method != "GET" or "{" in route.path or (route.method, route.path) in NOT_WALKED:
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


def judge(
    walk: Walk,
    where: str,
    answer: httpx.Response,
    sent: str,
    method: str,
    foreign: bool,
    asks_about_a: bool,
    api: bool,
) -> None:
    """The rules of the walk for one answer."""
    if answer.status_code >= 500:
        walk.failures.append(
            f"5xx {where}: {walk.actor.name} got HTTP {answer.status_code}: {answer.text[:200]!r}"
        )
        return
    walk.look(where, answer, sent)
    if walk.actor is CONTROL:
        return
    if foreign:
        # A's object in the path, or a body that would act on A's objects: refused.
        walk.refused(where, answer, api=api)
    elif asks_about_a and method != "GET" and answer.status_code < 400:
        walk.failures.append(
            f"ACCEPTED {where}: {walk.actor.name} got HTTP {answer.status_code} with A's values"
        )
    if api and answer.status_code >= 400:
        try:
            assert isinstance(answer.json()["error"]["code"], str)
        except (ValueError, KeyError, TypeError, AssertionError):
            walk.failures.append(f"ERROR BODY {where}: {answer.status_code} {answer.text[:200]!r}")
    if (
        api
        and answer.status_code < 300
        and answer.headers.get("content-type", "").startswith("application/json")
    ):
        structural(walk, where, answer.json())


def structural(walk: Walk, where: str, body: Any) -> None:
    """A JSON answer names no channel, account or conversation of A's the walker may not reach."""
    foreign_channels = set(walk.foreign("channel"))
    foreign_conversations = set(walk.foreign("conversation"))
    foreign_account = set(walk.foreign("account"))

    def visit(value: Any, key: str = "") -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k == "conversation" and isinstance(v, dict) and str(v.get("id")) in foreign_conversations:
                    walk.failures.append(f"LEAK {where}: A's conversation {v.get('id')} in the answer")
                visit(v, k)
        elif isinstance(value, list):
            for v in value:
                visit(v, key)
        elif key == "channel_id" and str(value) in foreign_channels:
            walk.failures.append(f"LEAK {where}: {walk.actor.name} was shown A's channel_id {value}")
        elif key == "account_id" and str(value) in foreign_account:
            walk.failures.append(f"LEAK {where}: {walk.actor.name} was shown A's account_id {value}")

    visit(body)


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
        if (route.method, route.path) in NOT_WALKED or route.path == "/live":
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


# --- the test ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def isolated(database_url: str, simulator: Simulator) -> Iterator[tuple[Gateway, FastAPI, Receiver]]:
    receiver = Receiver()
    # The walk adds a template to Main's WABA in the simulator (shared by the session): put it back.
    templates = f"{simulator.url}/_sim/templates/{MAIN['waba_id']}"
    seeded = simulator.http.get(templates).json()["data"]
    try:
        with gateway_with_app(
            database_url, simulator, isolation_spec(), wire_simulator=True, allow_private_urls=True
        ) as (gateway, app):
            yield gateway, app, receiver
    finally:
        simulator.http.put(templates, json={"data": seeded}).raise_for_status()
        receiver.stop()


def session_of(gateway: Gateway, actor: Actor) -> httpx.Client:
    client = httpx.Client(base_url=gateway.url, timeout=15)
    assert post_login(client, actor.email, actor.password).status_code == 303, f"{actor.name} signs in"
    return client


def test_no_walker_finds_or_touches_the_first_accounts_data(
    isolated: tuple[Gateway, FastAPI, Receiver], database_url: str
) -> None:
    gateway, app, receiver = isolated
    backend = "sqlite" if database_url.startswith("sqlite") else "postgresql"
    spec = gateway.http.get(f"{gateway.url}/openapi.json").json()
    routes = dashboard_routes(app)
    admin = session_of(gateway, CONTROL)
    a = make_account_a(gateway, receiver, admin)
    # B has data of its own, so that its lists are not empty.
    b_customer = new_number()
    gateway.sim.inbound(GLOBEX["phone_number_id"], b_customer, "isob own inbound")
    counts: Counter[str] = Counter()

    # The control: A's administrator sees every marker somewhere, and no secret anywhere.
    control = Walk(CONTROL, a, gateway, [], counts)
    walk_api_control(control, spec)
    walk_dashboard_control(control, routes, admin)
    unseen = {m: v for m, v in a.markers.items() if m not in a.unshown and m not in control.seen}
    assert not unseen, f"[{backend}] the control walk never saw these markers: {unseen}"
    assert not control.failures, f"[{backend}] " + "\n".join(control.failures[:40])

    before = settle(gateway)
    assert before["messages"] and before["simulator"] and before["delivery_attempts"], "A's data is there"
    failures: list[str] = []
    control.failures = failures
    walks = [Walk(actor, a, gateway, failures, counts) for actor in ACTORS]
    sessions = {actor.name: session_of(gateway, actor) for actor in ACTORS}
    sessions[CONTROL.name] = admin
    try:
        for walk in walks:
            walk_api(walk, spec, receiver.url("").rstrip("/"))
            walk_customers(walk)
            walk_dashboard(walk, routes, sessions[walk.actor.name], receiver.url("").rstrip("/"))
        for walk in walks:
            walk_lists_again(walk, spec, routes, sessions[walk.actor.name])
        for walk in [*walks, control]:
            check_usage(walk)
        after = settle(gateway)
        for table in before:
            if before[table] != after[table]:
                gone = sorted(set(before[table]) - set(after[table]))[:3]
                new = sorted(set(after[table]) - set(before[table]))[:3]
                failures.append(f"CHANGED A's {table} after the walk: before {gone} after {new}")
        # Last, as it adds to A's data: the live stream, while A's customers write.
        heard = walk_live(gateway, a, [*walks, control], sessions)
        posts = check_events(gateway, a, receiver, failures)
    finally:
        for client in sessions.values():
            client.close()

    # The walk reached what each may see: the control heard both inboxes, each agent its own, and
    # each agent was shown data of its own inbox.
    for walk in [*walks, control]:
        if walk.actor.account != "acme":
            continue
        for scope in walk.actor.own_channels:
            heard_own = {str(c.get("channel_id")) for c in heard[walk.actor.name]}
            assert str(gateway.ids[scope]) in heard_own, (
                f"[{backend}] {walk.actor.name} heard its inbox {scope}"
            )
            own = {m for m, v in a.markers.items() if v[0] == scope}
            assert own & walk.seen, f"[{backend}] {walk.actor.name} was shown its own inbox's data"

    # Coverage: every operation and every route, walked by every walker.
    wanted_api = {("API", op.get("operationId", f"{m} {p}")) for m, p, op in operations(spec)}
    wanted_pages = {(r.method, r.path) for r in routes if (r.method, r.path) not in NOT_WALKED}
    for walk in walks:
        missing = (wanted_api | wanted_pages) - walk.covered
        assert not missing, f"[{backend}] {walk.actor.name} did not walk {sorted(missing)}"
    stale = set(NOT_WALKED) - {(r.method, r.path) for r in routes}
    assert not stale, f"NOT_WALKED names routes the app no longer has: {stale}"

    assert not failures, f"[{backend}] {len(failures)} isolation failures:\n" + "\n".join(failures[:60])
    print(f"\n[{backend}] requests per walker: {dict(counts)}; posts to B's webhooks read: {posts}")
    for walk in walks:
        print(f"[{backend}] {walk.actor.name}: answers by status {dict(sorted(walk.statuses.items()))}")
    print(f"[{backend}] walked: {sorted(wanted_api | wanted_pages)}")


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


def walk_dashboard_control(walk: Walk, routes: list[PageRoute], client: httpx.Client) -> None:
    for route in routes:
        if route.method != "GET" or (route.method, route.path) in NOT_WALKED or route.path == "/live":
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


def test_the_walk_names_the_route_the_user_and_the_marker_of_a_leak() -> None:
    """The walk's judgement on answers made up here: a leak, an accepted request about A's object,
    a refusal that tells A's ids from unknown ones, each named by route, user and marker."""
    a = AccountA()
    marker = a.mark("isoa-main-secret-text", "main", "main's reply text")
    a.add("message", "main", "msg_01aaaaaaaaaaaaaaaaaaaaaaaa")
    gateway = Gateway("http://127.0.0.1:1", httpx.Client(), None, "", {"acme": 1, "globex": 2})  # type: ignore[arg-type]
    failures: list[str] = []
    walk = Walk(ACTORS[0], a, gateway, failures, Counter())
    request = httpx.Request("GET", "http://127.0.0.1:1/v1/accounts/2/whatsapp/messages")

    def answer(status: int, body: Any) -> httpx.Response:
        return httpx.Response(status, json=body, request=request)

    judge(
        walk,
        "API list_messages GET /x",
        answer(200, {"data": [{"text": marker}]}),
        "",
        "GET",
        False,
        True,
        True,
    )
    assert failures == [
        f"LEAK API list_messages GET /x: B's administrator was shown main's reply text ({marker!r}), HTTP 200"
    ]
    judge(walk, "API get_message GET /y", answer(200, {"id": "msg_x"}), "", "GET", True, False, True)
    assert failures[-1].startswith("NOT REFUSED API get_message GET /y: B's administrator got HTTP 200")
    refused = {"error": {"code": "message_not_found", "message": "No such message.", "details": []}}
    judge(walk, "API get_message GET /z", answer(404, refused), "", "GET", True, False, True)
    assert len(failures) == 2, "a 404 with the contract's body is the refusal expected"
    walk.compare(
        "API get_message GET /z",
        answer(404, refused),
        answer(403, {"error": {"code": "forbidden"}}),
        api=True,
    )
    assert failures[-1].startswith("PROBE API get_message GET /z: B's administrator tells A's ids")
    judge(
        walk,
        "API list_messages GET /w",
        answer(200, {"data": [{"channel_id": 9}]}),
        marker,
        "GET",
        False,
        True,
        True,
    )
    assert len(failures) == 3, "a marker the request itself carried is no leak"
