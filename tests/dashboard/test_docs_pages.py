"""`/docs` (Swagger UI) and `/redoc` (ReDoc) load every script, style and request from the gateway's own
origin, under the dashboard's CSP (issue 45, point 6; API.md: "Every page of the origin, `/docs` and
`/redoc` included, loads scripts and styles only from the same origin"). In Chromium: every request the
page makes is recorded, as is every CSP violation and console error, and the API's operations must be
rendered. SQLite only: the pages read no database."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import ConsoleMessage, Page, expect

from support.harness import Gateway
from wagate.dashboard.web import SECURITY_HEADERS

SIZES = {"desktop": (1280, 900), "phone": (390, 844)}
# Records each CSP refusal the page meets, before any of its scripts runs.
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  const where = `${event.sourceFile}:${event.lineNumber}`;
  window.__violations.push(`${event.effectiveDirective} ${event.blockedURI} ${where}`);
});
"""


@pytest.fixture(scope="module")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('sqlite') / 'wagate.db'}"


class Recorded:
    """What a page asked for, and what went wrong, from its first request on."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.requests: list[str] = []
        self.failed: list[str] = []
        self.console: list[str] = []
        page.add_init_script(RECORD_VIOLATIONS)
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("requestfailed", lambda request: self.failed.append(f"{request.url} {request.failure}"))
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.console.append(f"page error: {error}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.console.append(f"{message.type}: {message.text}")

    def assert_clean(self, origin: str) -> None:
        elsewhere = [url for url in self.requests if not same_origin(url, origin)]
        assert not elsewhere, f"requests to another origin: {elsewhere}"
        assert not self.failed, self.failed
        violations: list[str] = self.page.evaluate("window.__violations")
        assert not violations, violations
        errors = [line for line in self.console if line.startswith(("error", "page error"))]
        assert not errors, errors


def same_origin(url: str, origin: str) -> bool:
    """The gateway's origin, or what the page makes from it without asking anyone (data:, blob:)."""
    if url.startswith(("data:", "blob:" + origin)):
        return True
    parts, ours = urlsplit(url), urlsplit(origin)
    return (parts.scheme, parts.netloc) == (ours.scheme, ours.netloc)


def directives(policy: str) -> dict[str, str]:
    return dict(part.strip().partition(" ")[::2] for part in policy.split(";"))


def assert_policy(policy: str, path: str) -> str:
    """The dashboard's CSP. On /redoc, only for ReDoc's styles and search: `style-src` also allows <style>
    elements with the response's nonce (styled-components') or two hashes (the bundle's one style),
    and `worker-src` workers made from `blob:`. Returns the nonce ("" on /docs)."""
    ours = directives(SECURITY_HEADERS["Content-Security-Policy"])
    got = directives(policy)
    if path == "/docs":
        assert got == ours
        return ""
    styles = got.pop("style-src").split()
    assert got.pop("worker-src") == "blob:"
    assert got == {name: value for name, value in ours.items() if name != "style-src"}
    assert styles[0] == "'self'" and len(styles) == 4, styles
    nonce = re.fullmatch(r"'nonce-([\w-]{24})'", styles[1])
    assert nonce, styles
    assert all(re.fullmatch(r"'sha256-[\w+/]{43}='", source) for source in styles[2:]), styles
    return nonce[1]


def screenshots(page: Page, name: str, tmp_path: Path) -> None:
    out = Path(os.environ.get("WAGATE_TEST_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    for size, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(300)  # the layout settles (ReDoc moves its menu behind a button)
        page.screenshot(path=str(out / f"{name}-{size}.png"))
    page.set_viewport_size({"width": 1280, "height": 900})


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_pages_send_the_dashboards_security_headers_and_no_inline_script(
    gateway: Gateway, path: str
) -> None:
    response = gateway.http.get(f"{gateway.url}{path}")
    assert response.status_code == 200
    for name, value in SECURITY_HEADERS.items():
        if name != "Content-Security-Policy":
            assert response.headers[name] == value
    assert_policy(response.headers["content-security-policy"], path)
    html = response.text
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", html, re.S)
    assert scripts
    for attributes, body in scripts:
        assert body.strip() == ""  # no inline script
        assert re.search(r'\bsrc="/(docs/assets|static)/[\w.-]+\.js"', attributes), attributes
    assert "<style" not in html and " style=" not in html
    assert "//" not in html  # no address of another origin: no http://, https:// or //host


def test_each_redoc_page_has_a_nonce_of_its_own(gateway: Gateway) -> None:
    nonces = {
        assert_policy(gateway.http.get(f"{gateway.url}/redoc").headers["content-security-policy"], "/redoc")
        for _ in range(3)
    }
    assert len(nonces) == 3


@pytest.mark.parametrize(
    ("asset", "kind"),
    [
        ("/docs/assets/swagger-ui-bundle.js", "javascript"),
        ("/docs/assets/swagger-ui.css", "text/css"),
        ("/docs/assets/redoc.standalone.js", "javascript"),
        ("/static/api-docs.js", "javascript"),
        ("/static/api-docs.css", "text/css"),
    ],
)
def test_the_assets_are_served_by_the_gateway(gateway: Gateway, asset: str, kind: str) -> None:
    response = gateway.http.get(f"{gateway.url}{asset}")
    assert response.status_code == 200
    assert kind in response.headers["content-type"]
    assert len(response.content) > 50


def test_an_unknown_asset_is_the_apis_404(gateway: Gateway) -> None:
    response = gateway.http.get(f"{gateway.url}/docs/assets/nothing.js")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_swagger_ui_renders_the_operations_from_this_origin_only(
    page: Page, gateway: Gateway, tmp_path: Path
) -> None:
    recorded = Recorded(page)
    response = page.goto(f"{gateway.url}/docs")
    assert response is not None and response.status == 200
    assert_policy(response.headers["content-security-policy"], "/docs")
    send = page.locator(".opblock-summary", has_text="Send a message").first
    expect(send).to_be_visible(timeout=15_000)
    expect(page.locator(".opblock").first).to_be_visible()
    assert page.locator(".opblock").count() >= 10
    # An operation opens: its parameters, its responses and their schemas are drawn.
    send.click()
    expect(page.get_by_role("button", name="Try it out")).to_be_visible()
    expect(page.locator(".responses-table").first).to_be_visible()
    screenshots(page, "docs", tmp_path)
    recorded.assert_clean(gateway.url)
    assert f"{gateway.url}/openapi.json" in recorded.requests
    assert f"{gateway.url}/docs/assets/swagger-ui-bundle.js" in recorded.requests


def test_redoc_renders_the_operations_from_this_origin_only(
    page: Page, gateway: Gateway, tmp_path: Path
) -> None:
    recorded = Recorded(page)
    response = page.goto(f"{gateway.url}/redoc")
    assert response is not None and response.status == 200
    nonce = assert_policy(response.headers["content-security-policy"], "/redoc")
    heading = page.locator("h2", has_text="Send a message").first
    expect(heading).to_be_visible(timeout=15_000)
    # ReDoc draws with <style> elements of its own (styled-components'), with the response's nonce, and
    # every one of them applies (a refused one has no sheet).
    styles: list[list[object]] = page.evaluate(
        "[...document.querySelectorAll('style')].map((s) => [s.nonce, s.sheet !== null])"
    )
    assert [nonce, True] in styles
    assert all(applied for _, applied in styles), styles
    menu = page.locator("[role=menuitem]", has_text="Send a message").first
    expect(menu).to_be_attached()
    # The search box finds an operation.
    search = page.get_by_placeholder("Search...")
    search.fill("bulk")
    expect(page.locator("[data-role='search:results'] li").first).to_be_visible(timeout=10_000)
    search.fill("")
    screenshots(page, "redoc", tmp_path)
    recorded.assert_clean(gateway.url)
    assert f"{gateway.url}/openapi.json" in recorded.requests
    assert f"{gateway.url}/docs/assets/redoc.standalone.js" in recorded.requests
    # The search ran in ReDoc's worker, which `worker-src blob:` lets it make.
    assert any(url.startswith(f"blob:{gateway.url}/") for url in recorded.requests)


def test_try_it_out_calls_the_api_on_this_origin(page: Page, gateway: Gateway) -> None:
    """Swagger UI's requests go to the API beside it (`connect-src 'self'`); without a key, 401."""
    recorded = Recorded(page)
    page.goto(f"{gateway.url}/docs")
    operation = page.locator(".opblock", has=page.locator(".opblock-summary", has_text="List channels"))
    operation.locator(".opblock-summary").click()
    operation.get_by_role("button", name="Try it out").click()
    operation.locator("input[placeholder='account_id']").fill(str(gateway.ids["acme"]))
    operation.get_by_role("button", name="Execute").click()
    expect(operation.locator(".live-responses-table tr.response .response-col_status")).to_have_text("401")
    expect(operation.locator(".live-responses-table")).to_contain_text("unauthorized")
    api = f"{gateway.url}/v1/accounts/{gateway.ids['acme']}/whatsapp/channels"
    assert api in recorded.requests
    # The browser reports the 401 in the console: that one is expected.
    recorded.console = [line for line in recorded.console if "status of 401" not in line]
    recorded.assert_clean(gateway.url)
