"""The tenant-isolation walk's engine (tests/test_tenant_isolation.py): how a walker fills a request
with account A's values, makes it, and what it makes of the answer.

- `PATH_KINDS`, `QUERY_KINDS`: which of A's values (`AccountA.ids` kinds) a path or query parameter
  takes, by name; a path parameter missing here fails the walk by name ("teach PATH_KINDS").
- `dashboard_routes`, `operations`: the routes, read from the running app and its `/openapi.json`.
- `Walk`: one walker's requests and findings: A's values it may not reach (`foreign`) and its own,
  the markers it was shown (`look`), twins of A's ids that nobody has (`twin`: A's ids must answer as
  unknown ones do, `compare`), and what counts as a refusal (`refused`, `REFUSALS`).
- `call`, `expand`, `placeholders`, `combinations`: one counted request, and the fillings of
  `{kind}` placeholders with A's values.
- `judge`, `structural`: the rules for one answer (no 5xx, no marker the walker may not see, a
  refusal for A's objects, nothing accepted with A's values, the contract's error body, no A's
  channel, account or conversation named in a JSON answer).

The walkers themselves: tests/support/tenant_walk_api.py (the API) and tenant_walk_pages.py (the
dashboard and the live stream); the accounts: tenant_accounts.py.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI

from support.harness import Gateway
from support.tenant_accounts import CONTROL, AccountA, Actor

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
# Path parameters the walk fills with A's values, by name (`account_id`: the other account's id).
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


# --- the judge -------------------------------------------------------------------------------------


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
