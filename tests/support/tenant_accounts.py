"""The tenant-isolation walk's two accounts (tests/test_tenant_isolation.py): who walks, and what of
account A's they walk into.

- `isolation_spec`: the tests' usual two accounts, B (Globex) with an agent of its own.
- `Actor`, `ACTORS`, `CONTROL`: the walkers (B's administrator and agent, each of A's agents) and A's
  administrator, who walks first as the control; each with the marker scopes it must never be shown.
- `AccountA`, `make_account_a`: A filled with data of every kind, each piece a marker string with a
  scope, and A's ids by kind and scope (what the walkers put in paths, queries, headers and bodies).
- `snapshot`, `settle`: every row of A's and what the simulator sent from A's numbers, once A's data
  stops changing: compared before and after the walk, so no request may act on A.

The walkers and their judge are tests/support/tenant_walk.py and the modules beside it.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from support.app_in_thread import sql
from support.harness import (
    ADMIN_TOKEN,
    AGENT_TOKEN,
    MAIN,
    OTHER_TOKEN,
    OUTSIDER_TOKEN,
    SECOND,
    Gateway,
    new_number,
    post_login,
    provision_file,
    wait_for,
)
from support.receiver import Receiver

GLOBEX_AGENT_TOKEN = "wg_test_agent_token_globex_02"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


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


# --- signing in ------------------------------------------------------------------------------------


def session_of(gateway: Gateway, actor: Actor) -> httpx.Client:
    client = httpx.Client(base_url=gateway.url, timeout=15)
    assert post_login(client, actor.email, actor.password).status_code == 303, f"{actor.name} signs in"
    return client
