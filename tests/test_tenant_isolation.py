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

This module says what is walked (all but `NOT_WALKED`) and what must hold; how the walk is done is
tests/support/: `tenant_accounts` (the walkers, and A's data and state), `tenant_walk` (one walker's
requests and the judge of each answer), `tenant_walk_api` and `tenant_walk_pages` (the walkers of the
API, and of the dashboard and the live stream).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from support.app_in_thread import gateway_with_app
from support.harness import GLOBEX, MAIN, Gateway, Simulator, new_number
from support.receiver import Receiver
from support.tenant_accounts import (
    ACTORS,
    CONTROL,
    AccountA,
    isolation_spec,
    make_account_a,
    session_of,
    settle,
)
from support.tenant_walk import Walk, dashboard_routes, judge, operations
from support.tenant_walk_api import (
    check_events,
    check_usage,
    walk_api,
    walk_api_control,
    walk_customers,
    walk_lists_again,
)
from support.tenant_walk_pages import walk_dashboard, walk_dashboard_control, walk_live

# Routes outside the walk, each with its reason. Anything else the app serves is walked.
NOT_WALKED = {
    ("GET", "/static"): "the dashboard's own CSS/JS files: no account data",
    ("GET", "/login"): "the sign-in form, served before any session: no account data",
    ("POST", "/login"): "signing in takes no ids; its rules are tests/dashboard/test_sign_in.py's",
    ("POST", "/logout"): "ends the walker's own session and takes no ids",
    ("GET", "/webhooks/whatsapp"): "Meta's verification handshake: a token of the deployment, no account",
    ("POST", "/webhooks/whatsapp"): "Meta's receiver: authenticated by Meta's signature, not by an account",
}


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


def test_no_walker_finds_or_touches_the_first_accounts_data(
    isolated: tuple[Gateway, FastAPI, Receiver], database_url: str
) -> None:
    gateway, app, receiver = isolated
    backend = "sqlite" if database_url.startswith("sqlite") else "postgresql"
    spec = gateway.http.get(f"{gateway.url}/openapi.json").json()
    served = dashboard_routes(app)
    routes = [r for r in served if (r.method, r.path) not in NOT_WALKED]
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
    wanted_pages = {(r.method, r.path) for r in routes}
    for walk in walks:
        missing = (wanted_api | wanted_pages) - walk.covered
        assert not missing, f"[{backend}] {walk.actor.name} did not walk {sorted(missing)}"
    stale = set(NOT_WALKED) - {(r.method, r.path) for r in served}
    assert not stale, f"NOT_WALKED names routes the app no longer has: {stale}"

    assert not failures, f"[{backend}] {len(failures)} isolation failures:\n" + "\n".join(failures[:60])
    print(f"\n[{backend}] requests per walker: {dict(counts)}; posts to B's webhooks read: {posts}")
    for walk in walks:
        print(f"[{backend}] {walk.actor.name}: answers by status {dict(sorted(walk.statuses.items()))}")
    print(f"[{backend}] walked: {sorted(wanted_api | wanted_pages)}")


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
