"""Behind a TLS proxy (issue 45, point 7), with the real `wagate serve`: X-Forwarded-For and
X-Forwarded-Proto are believed from the peers of WAGATE_TRUSTED_PROXIES only. Believed, they give the
sign-in throttle each client's own address (one client's failures lock out no one else) and make the
dashboard's cookies Secure, named `__Host-...`; from any other peer they are ignored.
WAGATE_SECURE_COOKIES makes the cookies Secure over plain http too."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from support import gateway_process
from support.gateway_process import WAGATE, GatewayProcess, Provisioned, free_port

provisioned = gateway_process.provisioned

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
CLIENT = "203.0.113.7"
OTHER_CLIENT = "203.0.113.8"


def proxied(client: str = CLIENT) -> dict[str, str]:
    """The headers a TLS proxy adds to what it forwards."""
    return {"X-Forwarded-For": client, "X-Forwarded-Proto": "https"}


@contextmanager
def serving(provisioned: Provisioned, tmp_path: Path, name: str, **settings: str) -> Iterator[str]:
    """`wagate serve` on the module's database with these WAGATE_ settings; its URL."""
    env = {**provisioned.env, **{f"WAGATE_{key.upper()}": value for key, value in settings.items()}}
    gateway = GatewayProcess(env, free_port(), tmp_path, name=name)
    gateway.start()
    try:
        yield gateway.url
    finally:
        gateway.stop()


@dataclass(frozen=True)
class SetCookie:
    name: str
    value: str
    attributes: dict[str, str]  # lower-case names; a flag has ""

    @property
    def deletes(self) -> bool:
        return self.attributes.get("max-age") == "0"


class Browser:
    """Keeps cookies as a browser over https would, by their names, whatever the URL's scheme (httpx's
    jar holds back a Secure cookie from http://127.0.0.1, where the proxy's https ends)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.http = httpx.Client(base_url=url, timeout=10)
        self.headers = headers or {}
        self.cookies: dict[str, str] = {}
        self.last_set: dict[str, SetCookie] = {}

    def request(self, method: str, path: str, data: dict[str, str] | None = None) -> httpx.Response:
        headers = dict(self.headers)
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{name}={value}" for name, value in self.cookies.items())
        response = self.http.request(method, path, headers=headers, data=data)
        self.http.cookies.clear()
        self.last_set = {}
        for line in response.headers.get_list("set-cookie"):
            pair, *attributes = [part.strip() for part in line.split(";")]
            name, _, value = pair.partition("=")
            parsed = {k.lower(): v for k, _, v in (a.partition("=") for a in attributes)}
            self.last_set[name] = cookie = SetCookie(name, value.strip('"'), parsed)
            if cookie.deletes:
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = cookie.value
        return response

    def sign_in(self, email: str, password: str) -> httpx.Response:
        page = self.request("GET", "/login")
        assert page.status_code == 200, page.text
        token = CSRF.search(page.text)
        assert token is not None
        return self.request(
            "POST",
            "/login",
            data={
                "email": email,
                "password": password,
                "csrf_token": token.group(1),
                "next": "/conversations",
            },
        )

    def close(self) -> None:
        self.http.close()


def assert_secure(cookie: SetCookie) -> None:
    """What `__Host-` demands, or the browser drops the cookie: Secure, Path=/, no Domain."""
    assert cookie.name.startswith("__Host-"), cookie
    assert "secure" in cookie.attributes and cookie.attributes.get("path") == "/", cookie
    assert "domain" not in cookie.attributes and "httponly" in cookie.attributes, cookie


def throttled_answers(url: str, email: str, client: str, attempts: int = 7) -> list[int]:
    browser = Browser(url, proxied(client))
    try:
        return [browser.sign_in(email, f"wrong-{n}").status_code for n in range(attempts)]
    finally:
        browser.close()


def test_a_trusted_proxy_gives_the_client_address_and_https(provisioned: Provisioned, tmp_path: Path) -> None:
    # The default trusts a proxy on this machine, as the tests' connections come from 127.0.0.1.
    with serving(provisioned, tmp_path, "trusting") as url:
        browser = Browser(url, proxied())
        try:
            form = browser.request("GET", "/login")
            assert form.status_code == 200
            assert_secure(browser.last_set["__Host-wagate_login_csrf"])
            signed = browser.sign_in("agent@acme.test", "pw-agent")
            assert signed.status_code == 303, signed.text
            session = browser.last_set["__Host-wagate_session"]
            assert_secure(session)
            assert "wagate_session" not in browser.last_set
            # The form's cookie is deleted as it was set: a browser ignores a __Host- deletion without Secure.
            assert browser.last_set["__Host-wagate_login_csrf"].deletes
            assert_secure(browser.last_set["__Host-wagate_login_csrf"])
            assert browser.request("GET", "/conversations").status_code == 200
        finally:
            browser.close()
        # Over https the session is read under its __Host- name only: a bare `wagate_session` (one a
        # plain-http page or a sibling subdomain could plant) signs no one in.
        planted = Browser(url, proxied())
        planted.cookies["wagate_session"] = session.value
        try:
            assert planted.request("GET", "/conversations").status_code == 303
        finally:
            planted.close()

        # The throttle counts the address the proxy forwards: one client's failures for an email...
        answers = throttled_answers(url, "outsider@acme.test", CLIENT)
        assert answers[:5] == [401] * 5 and 429 in answers[5:], answers
        # ...leave the same email's owner at another address free to sign in.
        owner = Browser(url, proxied(OTHER_CLIENT))
        try:
            assert owner.sign_in("outsider@acme.test", "pw-out").status_code == 303
        finally:
            owner.close()


def test_forwarded_headers_from_a_peer_not_trusted_are_ignored(
    provisioned: Provisioned, tmp_path: Path
) -> None:
    with serving(provisioned, tmp_path, "distrusting", trusted_proxies="192.0.2.1") as url:
        browser = Browser(url, proxied())
        try:
            signed = browser.sign_in("agent@acme.test", "pw-agent")
            assert signed.status_code == 303, signed.text
            # Plain http, as the connection came: no Secure, no __Host- name.
            session = browser.last_set["wagate_session"]
            assert "secure" not in session.attributes
            assert not any(name.startswith("__Host-") for name in browser.cookies)
            assert browser.request("GET", "/conversations").status_code == 200
        finally:
            browser.close()
        # Every client has the connection's address: one client's failures lock the email out for all
        # (what a deployment gets when its proxy is not in WAGATE_TRUSTED_PROXIES).
        answers = throttled_answers(url, "boss@globex.test", CLIENT)
        assert 429 in answers[5:], answers
        owner = Browser(url, proxied(OTHER_CLIENT))
        try:
            assert owner.sign_in("boss@globex.test", "pw-boss").status_code == 429
        finally:
            owner.close()


def test_secure_cookies_are_forced_over_plain_http(provisioned: Provisioned, tmp_path: Path) -> None:
    with serving(provisioned, tmp_path, "forced", secure_cookies="true") as url:
        browser = Browser(url)
        try:
            browser.request("GET", "/login")
            assert_secure(browser.last_set["__Host-wagate_login_csrf"])
            signed = browser.sign_in("admin@acme.test", "pw-admin")
            assert signed.status_code == 303, signed.text
            session = browser.last_set["__Host-wagate_session"]
            assert_secure(session)
            page = browser.request("GET", "/conversations")
            assert page.status_code == 200
            token = CSRF.search(page.text)
            assert token is not None
            out = browser.request("POST", "/logout", data={"csrf_token": token.group(1)})
            assert out.status_code == 303
            deleted = browser.last_set["__Host-wagate_session"]
            assert deleted.deletes
            assert_secure(deleted)
        finally:
            browser.close()
        stolen = Browser(url)
        stolen.cookies["__Host-wagate_session"] = session.value
        try:
            assert stolen.request("GET", "/conversations").status_code == 303  # signed out
        finally:
            stolen.close()


def test_a_trusted_proxy_that_is_no_address_stops_the_start(tmp_path: Path) -> None:
    env = {
        "WAGATE_DATABASE_URL": f"sqlite:///{tmp_path / 'wagate.db'}",
        "WAGATE_TRUSTED_PROXIES": "proxy",
    }
    done = subprocess.run(
        [str(WAGATE), "serve", "--port", str(free_port())],
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("WAGATE_TRUSTED_PROXIES: 'proxy' is neither an IP address nor a network")
    assert "Traceback" not in done.stderr
