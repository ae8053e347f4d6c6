"""A real browser for the dashboard's tests: Debian's Chromium driven by Playwright (`executable_path`;
Playwright never downloads a browser here). `.ci/run` installs Chromium when it is missing; elsewhere
the browser tests are skipped without it (and fail under CI=true, so CI can never pass without them)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The flags this machine's Chromium needs (docs/dashboard.md): no sandbox as root, no calls home (the
# network is closed), and sound allowed without a click, so the notification rule can be observed.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]
# Counts every HTMLAudioElement.play() of the page, before any script of ours runs.
COUNT_SOUNDS = """
window.__plays = 0;
const play = HTMLMediaElement.prototype.play;
HTMLMediaElement.prototype.play = function () { window.__plays += 1; return play.call(this); };
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One browser per module: Playwright's sync API keeps an event loop running in this thread while
    it is open, which would stop the modules after it from running `asyncio.run`."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"Chromium is not installed at {CHROMIUM} (`apt-get install -y chromium`)")
        pytest.skip("Chromium is not installed (`apt-get install -y chromium`); CI installs it")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    made = browser.new_context(viewport={"width": 1280, "height": 900})
    made.add_init_script(COUNT_SOUNDS)
    yield made
    made.close()


@pytest.fixture
def page(context: BrowserContext) -> Iterator[Page]:
    """A tab whose script errors and console errors fail the test (a page that only looks right is not
    done): a CSP refusal, a broken script, a failed fetch all show there."""
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    opened.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    yield opened
    # A refused sign-in, form or page is part of some tests: its status in the console is expected.
    unexpected = [e for e in errors if not re.search(r"status of (401|403|404|409|422)", e)]
    assert not unexpected, unexpected
