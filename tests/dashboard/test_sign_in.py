"""Signing in to the dashboard over HTTP (issue 11, point 2): argon2 hashes (older scrypt ones replaced
at the next sign-in), server-side sessions that sign-out ends, CSRF on the sign-in form, the throttle."""

from __future__ import annotations

import re

import httpx

from support.app_in_thread import sql
from support.harness import Gateway, post_login
from wagate.core.security import (
    _verify_scrypt,  # noqa: F401 (the scheme the old hashes used exists)
    hash_password,
)

TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


def login_page(client: httpx.Client) -> str:
    page = client.get("/login")
    assert page.status_code == 200 and "Sign in" in page.text
    match = TOKEN.search(page.text)
    assert match is not None
    return match.group(1)


def test_a_signed_out_page_goes_to_the_sign_in_form_and_back(gateway: Gateway) -> None:
    with httpx.Client(base_url=gateway.url) as client:
        first = client.get("/conversations?status=pending")
        assert first.status_code == 303
        assert first.headers["location"] == "/login?next=%2Fconversations%3Fstatus%3Dpending"
        token = login_page(client)
        signed = client.post(
            "/login",
            data={
                "email": "agent@acme.test",
                "password": "pw-agent",
                "csrf_token": token,
                "next": "/conversations?status=pending",
            },
        )
        assert signed.status_code == 303 and signed.headers["location"] == "/conversations?status=pending"
        cookie = signed.headers["set-cookie"]
        assert "wagate_session=" in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie
        assert client.get("/conversations").status_code == 200
        # Another site is never where sign-in sends the browser.
        client.cookies.clear()
        token = login_page(client)
        away = client.post(
            "/login",
            data={
                "email": "agent@acme.test",
                "password": "pw-agent",
                "csrf_token": token,
                "next": "//evil.example/",
            },
        )
        assert away.headers["location"] == "/conversations"


def test_sign_out_ends_the_session_everywhere(gateway: Gateway) -> None:
    with httpx.Client(base_url=gateway.url) as client:
        assert post_login(client, "agent@acme.test", "pw-agent").status_code == 303
        session = client.cookies["wagate_session"]
        page = client.get("/conversations")
        csrf = TOKEN.search(page.text)
        assert csrf is not None
        assert client.post("/logout", data={"csrf_token": csrf.group(1)}).status_code == 303
    # The cookie, kept by someone, is worthless now.
    with httpx.Client(base_url=gateway.url, cookies={"wagate_session": session}) as stolen:
        assert stolen.get("/conversations").status_code == 303


def test_the_sign_in_form_needs_its_csrf_token(gateway: Gateway) -> None:
    with httpx.Client(base_url=gateway.url) as client:
        login_page(client)
        refused = client.post("/login", data={"email": "agent@acme.test", "password": "pw-agent"})
        assert refused.status_code == 403
        assert "wagate_session" not in client.cookies


def test_an_old_scrypt_hash_still_signs_in_and_becomes_argon2(gateway: Gateway) -> None:
    # A hash as databases made before argon2 hold it.
    import base64
    import hashlib
    import secrets

    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(b"pw-boss", salt=salt, n=2**14, r=8, p=1, dklen=32)
    old = "scrypt$" + base64.b64encode(salt).decode() + "$" + base64.b64encode(digest).decode()
    sql(gateway.database_url, "UPDATE users SET password_hash = :h WHERE email = 'boss@globex.test'", h=old)
    with httpx.Client(base_url=gateway.url) as client:
        assert post_login(client, "boss@globex.test", "pw-boss").status_code == 303
    [(stored,)] = sql(
        gateway.database_url, "SELECT password_hash FROM users WHERE email = 'boss@globex.test'"
    )
    assert stored.startswith("$argon2id$")
    assert hash_password("x").startswith("$argon2id$")


def test_repeated_failures_are_throttled(gateway: Gateway) -> None:
    with httpx.Client(base_url=gateway.url) as client:
        answers = [post_login(client, "outsider@acme.test", f"wrong-{n}").status_code for n in range(7)]
        assert answers[:5] == [401] * 5
        assert 429 in answers[5:]
        # While throttled even the right password waits.
        throttled = post_login(client, "outsider@acme.test", "pw-out")
        assert throttled.status_code == 429 and "try again in" in throttled.text
