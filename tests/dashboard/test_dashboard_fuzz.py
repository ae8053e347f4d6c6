"""The dashboard under generated input (issue 14, point 1): no path, query or form sent to any dashboard
route, signed in or not, gets a 5xx, on SQLite and PostgreSQL.

The routes are read from the app at run time (a page added later is fuzzed too), the form fields and
query names from what the pages themselves render (`name="..."`, links' query strings), the ids from
their links; values are anything: real ids, huge and negative numbers, control characters, long and
non-ASCII text. Signed-in forms carry the session's real CSRF token, so that they reach the services
behind the checks. Plain HTTP is enough here: the point is the server's answer, not the page's script.
`WAGATE_FUZZ_EXAMPLES` multiplies the number of requests for a longer run (docs/reliability.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from cryptography.fernet import Fernet
from fastapi.routing import iter_route_contexts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.harness import MAIN, Gateway, new_number, post_login
from wagate.api.app import create_app
from wagate.core.config import Settings

SCALE = int(os.environ.get("WAGATE_FUZZ_EXAMPLES", "1"))
NOT_DASHBOARD = ("/v1/", "/webhooks/", "/openapi", "/docs", "/redoc", "/healthz", "/readyz")
# Fuzzed by a test of its own (last: failed sign-ins throttle the address) or left alone on purpose.
SEPARATELY = {("POST", "/login"), ("POST", "/logout"), ("GET", "/live")}
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
FIELD_NAMES = re.compile(r'name="([A-Za-z_][\w.\[\]-]*)"')
QUERY_NAMES = re.compile(r"[?&;](?:amp;)?([A-Za-z_]\w*)=")
FORMS = re.compile(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.DOTALL)
LINKED_IDS = re.compile(r'href="/[\w/-]*?/(\d+)')

ODD_TEXT = st.sampled_from(
    [
        "",
        " ",
        "0",
        "-1",
        "9" * 30,
        "1e309",
        "\x00",
        "a\x01b",
        "x" * 70_000,
        "😀",
        "'; DROP TABLE x;--",
        "<script>",
        "../../etc/passwd",
        "%00",
        "+994501234567",
        "wg_",
        "true",
        "[]",
        "{}",
        "NaN",
    ]
)
VALUES = st.one_of(
    st.text(max_size=40),
    ODD_TEXT,
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)


def dashboard_routes() -> list[tuple[str, str]]:
    """(method, path) of every dashboard route of the app, read from the app itself."""
    app = create_app(Settings(secret_key=Fernet.generate_key().decode()))
    found = []
    for route in iter_route_contexts(app.routes):  # FastAPI includes routers lazily
        path = route.path
        if path.startswith(NOT_DASHBOARD) or path.startswith("/static"):
            continue
        found += [(m, path) for m in sorted(route.methods or ()) if m in ("GET", "POST")]
    assert ("GET", "/conversations") in found, found
    return found


ROUTES = dashboard_routes()


@dataclass
class Vocabulary:
    """What the pages showed: the names of their fields and query parameters, and ids in their links."""

    fields: set[str] = field(default_factory=set)
    queries: set[str] = field(default_factory=set)
    ids: set[str] = field(default_factory=set)
    # The fields of each form, by the path it posts to (`/settings/api-keys/3/revoke`).
    forms: dict[str, set[str]] = field(default_factory=dict)

    def learn(self, html: str) -> None:
        self.fields |= set(FIELD_NAMES.findall(html))
        self.queries |= set(QUERY_NAMES.findall(html))
        self.ids |= set(LINKED_IDS.findall(html))
        for action, inner in FORMS.findall(html):
            path = action.split("?", 1)[0]
            self.forms.setdefault(path, set()).update(FIELD_NAMES.findall(inner))

    def fields_of(self, template: str) -> list[str]:
        """The fields of every form that posts to the route `template` (ids in it match any)."""
        pattern = re.compile("^" + re.sub(r"\\{\w+\\}", "[^/]+", re.escape(template)) + "$")
        return sorted({name for path, names in self.forms.items() if pattern.match(path) for name in names})


@dataclass
class Session:
    client: httpx.Client
    email: str
    password: str
    csrf: str = ""

    def sign_in(self) -> None:
        self.client.cookies.clear()
        assert post_login(self.client, self.email, self.password).status_code == 303
        page = self.client.get("/settings/api-keys" if "admin" in self.email else "/conversations")
        token = CSRF.search(page.text)
        assert token is not None, page.text[:500]
        self.csrf = token.group(1)


@pytest.fixture(scope="module")
def fuzzed(delivering_gateway: Gateway) -> Iterator[tuple[Gateway, Vocabulary, dict[str, Session]]]:
    gateway = delivering_gateway
    # Something on every page: a message, a customer's reply (a conversation), a batch, a webhook.
    number = new_number()
    sent = gateway.otp(number).json()["id"]
    gateway.wait_status(sent, "delivered")
    gateway.sim.inbound(MAIN["phone_number_id"], number, "hello")
    batch = {
        "channel_id": gateway.ids["main"],
        "template": {"name": "otp_code", "language": "en", "parameters": ["1"]},
        "phone_numbers": [new_number()],
    }
    assert (
        gateway.http.post(
            gateway.v1("/whatsapp/bulk_messages"), json=batch, headers=gateway.headers()
        ).status_code
        == 202
    )
    hook = {"url": "http://127.0.0.1:9/hooks", "events": ["message_updated"]}  # nothing listens: retried
    assert gateway.http.post(gateway.v1("/webhooks"), json=hook, headers=gateway.headers()).status_code == 201

    vocabulary = Vocabulary()
    sessions = {}
    for role, email, password in (
        ("admin", "admin@acme.test", "pw-admin"),
        ("agent", "agent@acme.test", "pw-agent"),
    ):
        client = httpx.Client(base_url=gateway.url, timeout=30)
        session = Session(client, email, password)
        session.sign_in()
        for method, path in ROUTES:
            if method == "GET" and "{" not in path and (method, path) not in SEPARATELY:
                vocabulary.learn(client.get(path).text)
        sessions[role] = session
    for link_id in list(vocabulary.ids)[:20]:
        for method, path in ROUTES:
            if method == "GET" and path.count("{") == 1 and (method, path) not in SEPARATELY:
                vocabulary.learn(sessions["admin"].client.get(re.sub(r"{\w+}", link_id, path)).text)
    try:
        yield gateway, vocabulary, sessions
    finally:
        for session in sessions.values():
            session.client.close()


def fill(path: str, data: st.DataObject, vocabulary: Vocabulary) -> str:
    def one(_: re.Match[str]) -> str:
        value = data.draw(st.sampled_from(sorted(vocabulary.ids) or ["1"]) | VALUES, label="path")
        return quote(value[:3000], safe="") or "0"  # escaped, as a browser would

    return re.sub(r"{\w+}", one, path)


def assert_no_5xx(response: httpx.Response, method: str, path: str, sent: Any) -> None:
    assert response.status_code < 500, (method, path, sent, response.status_code, response.text[:500])


@pytest.mark.parametrize("role", ["admin", "agent"])
def test_no_dashboard_route_answers_5xx_to_any_input(
    fuzzed: tuple[Gateway, Vocabulary, dict[str, Session]], role: str
) -> None:
    _, vocabulary, sessions = fuzzed
    session = sessions[role]
    routes = [r for r in ROUTES if r not in SEPARATELY]
    names = st.sampled_from(sorted(vocabulary.fields | vocabulary.queries) or ["q"]) | st.text(max_size=12)
    tried: list[tuple[str, str]] = []

    def fuzz(route: tuple[str, str]) -> None:
        own = vocabulary.fields_of(route[1]) if route[0] == "POST" else []
        own_fields = st.fixed_dictionaries({}, optional={name: VALUES for name in own})

        @settings(
            max_examples=10 * SCALE, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(
            query=st.dictionaries(names, VALUES.map(lambda v: v[:3000]), max_size=4),
            form=st.tuples(own_fields, st.dictionaries(names, VALUES, max_size=3)).map(
                lambda pair: {**pair[1], **pair[0]}
            ),
            csrf=st.sampled_from(["real", "real", "real", "none", "wrong"]),
            data=st.data(),
        )
        def request(query: dict[str, str], form: dict[str, str], csrf: str, data: st.DataObject) -> None:
            method, template = route
            path = fill(template, data, vocabulary)
            if method == "GET":
                response = session.client.get(path, params=query)
            else:
                if csrf != "none":
                    form["csrf_token"] = session.csrf if csrf == "real" else "forged"
                response = session.client.post(path, params=query, data=form)
            assert_no_5xx(response, method, path, (query, form))
            location = response.headers.get("location", "")
            if response.status_code in (302, 303) and location.startswith("/login"):
                session.sign_in()  # a fuzzed action ended the session (a revoked key is not one of them)

        request()
        tried.append(route)

    for route in routes:
        fuzz(route)
    assert tried == routes


def test_raw_bodies_of_any_type_get_no_5xx(fuzzed: tuple[Gateway, Vocabulary, dict[str, Session]]) -> None:
    """Bodies a browser would never send: broken multipart, JSON, binary, huge field counts."""
    _, _, sessions = fuzzed
    session = sessions["admin"]
    posts = [
        path
        for method, path in ROUTES
        if method == "POST" and "{" not in path and (method, path) not in SEPARATELY
    ]
    bodies = [
        ("multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data\r\n\r\nbroken"),
        ("multipart/form-data", b"no boundary at all"),
        ("application/json", b'{"csrf_token": "' + session.csrf.encode() + b'"}'),
        ("application/x-www-form-urlencoded", b"&".join(b"f%d=1" % i for i in range(5000))),
        ("application/x-www-form-urlencoded", b"csrf_token=" + session.csrf.encode() + b"&name=%FF%FE%00"),
        ("application/octet-stream", bytes(range(256)) * 10),
        ("text/csv", b"phone_number\n+994501234567\n"),
    ]
    for path in posts:
        for content_type, body in bodies:
            response = session.client.post(path, content=body, headers={"Content-Type": content_type})
            assert_no_5xx(response, "POST", path, content_type)


def test_the_sign_in_form_gets_no_5xx_for_any_input(
    fuzzed: tuple[Gateway, Vocabulary, dict[str, Session]],
) -> None:
    """Last in the module: failed sign-ins throttle the address (429), which is an answer too."""
    gateway, _, _ = fuzzed
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        page = client.get("/login")
        token = CSRF.search(page.text)
        assert token is not None

        @settings(
            max_examples=60 * SCALE, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(email=VALUES, password=VALUES, next_=VALUES, real_token=st.booleans())
        def sign_in(email: str, password: str, next_: str, real_token: bool) -> None:
            form = {
                "email": email,
                "password": password,
                "next": next_,
                "csrf_token": token.group(1) if real_token else "forged",
            }
            response = client.post("/login", data=form)
            assert_no_5xx(response, "POST", "/login", form)

        sign_in()


def test_a_page_address_that_does_not_validate_is_the_error_page(
    fuzzed: tuple[Gateway, Vocabulary, dict[str, Session]],
) -> None:
    """A browser gets the dashboard's error page for a bad id or cursor in a page's address (the API
    keeps its JSON error body: tests/api/test_hostile_input.py)."""
    _, _, sessions = fuzzed
    session = sessions["admin"]
    for path in (
        "/settings/api-keys?before=abc",
        "/settings/audit?before=abc",
        "/conversations/abc",
        f"/settings/api-keys?before={2**40}",
    ):
        page = session.client.get(path)
        assert page.status_code == 422, (path, page.status_code)
        assert page.headers["content-type"].startswith("text/html"), (path, page.text[:200])
        assert "Sign out" in page.text


def test_a_reply_with_a_template_choice_that_does_not_validate_is_refused_on_its_page(
    fuzzed: tuple[Gateway, Vocabulary, dict[str, Session]],
) -> None:
    """Found by the fuzz above: a reply's `template` field without a language (`otp_code|`) was a 500.
    It is the conversation's page with the refusal in the reply box, as any refused reply."""
    _, vocabulary, sessions = fuzzed
    session = sessions["agent"]
    replies = [path for path in vocabulary.forms if re.fullmatch(r"/conversations/\d+/reply", path)]
    assert replies, sorted(vocabulary.forms)
    for choice in ("otp_code|", "|en", "x" * 600 + "|en", "otp_code"):
        page = session.client.post(replies[0], data={"template": choice, "csrf_token": session.csrf})
        assert page.status_code == 422, (choice[:20], page.status_code, page.text[:300])
        assert page.headers["content-type"].startswith("text/html")
        refusal = '<p class="alert" role="alert">'
        assert refusal in page.text, page.text[:300]
        alert = page.text.split(refusal, 1)[1].split("</p>", 1)[0]
        assert alert.startswith("Template"), alert  # named as the page labels it
        assert "template." not in alert, alert  # the field's issue is said once, not again as a detail
        assert "pydantic" not in page.text
