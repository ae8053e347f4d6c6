"""Screenshots of the dashboard's main pages for docs/, at desktop and phone width.

Starts `wagate serve --sandbox` on a scratch database, makes some traffic through the API and the
simulator (an OTP that is read, a customer who writes, a failed send), signs in with the password the
sandbox prints, and photographs the pages with Debian's Chromium:

    .venv/bin/python scripts/dashboard_screenshots.py [--out docs/screenshots]
"""

# ruff: noqa: RUF001 (customers write Azerbaijani, whose dotless i is meant)

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from playwright.sync_api import Page, sync_playwright

from wagate.ops.sandbox import DEMO_WABA_ID

ROOT = Path(__file__).resolve().parent.parent
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SIZES = {"desktop": (1280, 860), "phone": (390, 844)}


def start_sandbox(workdir: Path, port: int) -> tuple[subprocess.Popen[str], dict[str, str]]:
    env = {**os.environ, "WAGATE_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'wagate.db'}"}
    process = subprocess.Popen(  # noqa: S603 (our own wagate command)
        [str(ROOT / ".venv/bin/wagate"), "serve", "--sandbox", "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=workdir,
    )
    assert process.stderr is not None
    banner = ""
    deadline = time.monotonic() + 60
    while "Dashboard:" not in banner and time.monotonic() < deadline:
        banner += process.stderr.readline()
    found = {
        "token": re.search(r"API key \(shown once\): (\S+)", banner),
        "password": re.search(r"password (\S+), shown once", banner),
        "sim": re.search(r"Cloud API simulator (\S+)", banner),
        "account": re.search(r"account_id (\d+)", banner),
        "channel": re.search(r"channel_id (\d+)", banner),
    }
    values = {key: match.group(1) for key, match in found.items() if match}
    if len(values) != len(found):
        process.kill()
        sys.exit(f"the sandbox did not start as expected:\n{banner}")
    # Keep reading its log: a full pipe would stall the server mid-run.
    threading.Thread(target=process.stderr.read, daemon=True).start()
    return process, values


def traffic(url: str, sandbox: dict[str, str]) -> None:
    api = f"{url}/v1/accounts/{sandbox['account']}/whatsapp/messages"
    headers = {"Authorization": f"Bearer {sandbox['token']}"}
    otp = {"name": "otp_code", "language": "en", "parameters": ["482913"]}
    with httpx.Client(timeout=10) as http:
        for number in ("+994501112233", "+994551234567", "+994500001026"):  # the last has no WhatsApp
            http.post(
                api,
                headers=headers,
                json={"channel_id": int(sandbox["channel"]), "phone_number": number, "template": otp},
            ).raise_for_status()
        # Meta pauses a template that people blocked, rates it RED, announces a recategorisation and
        # rates another GREEN (the simulator's control API, which posts Meta's template webhooks).
        for what, change in (
            ("status", {"name": "spring_sale", "status": "PAUSED"}),
            ("quality", {"name": "spring_sale", "quality": "RED"}),
            ("category", {"name": "order_update", "category": "MARKETING", "announce": True}),
            ("quality", {"name": "otp_code", "quality": "GREEN"}),
        ):
            http.post(
                f"{sandbox['sim']}/_sim/templates/{DEMO_WABA_ID}/{what}", json={"language": "en", **change}
            ).raise_for_status()
        http.post(
            f"{sandbox['sim']}/_sim/inbound",
            json={
                "phone_number_id": "100000000000001",
                "from": "+994551234567",
                "text": "Hi! I did not get the code, can you send it again?",
                "name": "Aysel Mammadova",
            },
        ).raise_for_status()
        time.sleep(1)
        # A reply inside the window: a session message, priced as SESSION since 2026-10-01.
        http.post(
            api,
            headers=headers,
            json={
                "channel_id": int(sandbox["channel"]),
                "phone_number": "+994551234567",
                "text": "Sorry about that: a new code is on its way.",
                "conversation_status": "open",
            },
        ).raise_for_status()
        time.sleep(2)
        busy_day(http, api, headers, sandbox)


# Customers who write on a busy day, in the languages the gateway's users serve (issue 46).
CUSTOMERS = [
    ("+994501000001", "Şəhla Məmmədova", "Salam! Sifarişim nə vaxt çatacaq?"),
    ("+994501000002", "Elçin Həsənov", "Kodu almadım, yenidən göndərə bilərsiniz?"),
    ("+994501000003", "Наталья Иванова", "Здравствуйте, где мой заказ? Номер A-1042."),
    ("+994501000004", "Дмитрий Ковалёв", "Можно изменить адрес доставки?"),
    ("+994501000005", "John Smith", "Hi, is the store open on Sunday?"),
    ("+994501000006", "Gülnar Əliyeva", "Ödəniş keçmədi, nə etməliyəm?"),
    ("+994501000007", None, "Hello?"),
    ("+994501000008", "Ruslan Quliyev", "Təşəkkürlər, hər şey qaydasındadır."),
]


def busy_day(http: httpx.Client, api: str, headers: dict[str, str], sandbox: dict[str, str]) -> None:
    """Customers waiting for an answer, one answered, and a long thread (63 messages)."""
    channel = int(sandbox["channel"])
    for number, name, text in CUSTOMERS:
        inbound = {"phone_number_id": "100000000000001", "from": number, "text": text}
        if name:
            inbound["name"] = name
        http.post(f"{sandbox['sim']}/_sim/inbound", json=inbound).raise_for_status()
    # The edges: a long name and a long message; a window closing (written 21 h ago) and one closed.
    now = int(time.time())
    for number, name, text, ago in (
        (
            "+994501000010",
            "Məhəmmədəli Hüseynqulu oğlu Abdurrəhmanov-Qasımzadə",
            "Salam, dünən sifariş verdim amma hələ də heç bir təsdiq mesajı almamışam, "
            "kartımdan isə pul artıq çıxılıb. Zəhmət olmasa yoxlayın və mənə xəbər verin, "
            "çox təcili lazımdır.",
            60,
        ),
        ("+994501000011", "Kamran Əlizadə", "Sabah gələ bilərəmmi?", 21 * 3600),
        ("+994501000012", "Lalə Babayeva", "Cavab gözləyirəm...", 25 * 3600),
    ):
        http.post(
            f"{sandbox['sim']}/_sim/inbound",
            json={
                "phone_number_id": "100000000000001",
                "from": number,
                "text": text,
                "name": name,
                "timestamp": now - ago,
            },
        ).raise_for_status()
    time.sleep(1)
    # Ruslan is answered; the others wait.
    http.post(
        api,
        headers=headers,
        json={"channel_id": channel, "phone_number": "+994501000008", "text": "Biz də təşəkkür edirik!"},
    ).raise_for_status()
    long_thread = "+994501000099"
    for turn in range(32):
        http.post(
            f"{sandbox['sim']}/_sim/inbound",
            json={
                "phone_number_id": "100000000000001",
                "from": long_thread,
                "text": f"Question {turn + 1} about my order",
                "name": "Leyla Rzayeva",
            },
        ).raise_for_status()
        if turn < 31:
            http.post(
                api,
                headers=headers,
                json={"channel_id": channel, "phone_number": long_thread, "text": f"Answer {turn + 1}"},
            ).raise_for_status()
    time.sleep(2)


def shoot(page: Page, url: str, name: str, out: Path) -> None:
    for size, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        page.goto(url)
        page.wait_for_timeout(400)
        page.screenshot(path=str(out / f"{name}-{size}.png"), full_page=True)


def shoot_current(page: Page, name: str, out: Path) -> None:
    """The page as it is now (a filled form), at both widths, without loading it again."""
    for size, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(200)
        page.screenshot(path=str(out / f"{name}-{size}.png"), full_page=True)
    page.set_viewport_size({"width": SIZES["desktop"][0], "height": SIZES["desktop"][1]})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    parser.add_argument("--port", type=int, default=8765)
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{parser.parse_args().port}"
    with tempfile.TemporaryDirectory() as scratch:
        process, sandbox = start_sandbox(Path(scratch), parser.parse_args().port)
        try:
            traffic(url, sandbox)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
                page = browser.new_page()
                shoot(page, f"{url}/login", "login", out)
                page.get_by_label("Email").fill("admin@demo.test")
                page.get_by_label("Password").fill(sandbox["password"])
                page.get_by_role("button", name="Sign in").click()
                shoot(page, f"{url}/conversations?status=open", "conversations-open", out)
                shoot(page, f"{url}/conversations?status=resolved", "conversations-resolved", out)
                shoot(page, f"{url}/conversations?status=needs_reply", "conversations-needs-reply", out)
                shoot(page, f"{url}/conversations?status=pending", "conversations-pending-empty", out)
                page.goto(f"{url}/conversations?status=open&q=Lal%C9%99")
                page.locator(".conversations a").first.click()
                shoot(page, page.url, "conversation-closed-window", out)
                page.goto(f"{url}/conversations?status=open&q=Kamran")
                page.locator(".conversations a").first.click()
                shoot(page, page.url, "conversation-closing-window", out)
                shoot(page, f"{url}/conversations?status=open&q=SEHLA", "conversations-search", out)
                page.goto(f"{url}/conversations?status=open&q=Leyla")
                page.locator(".conversations a").first.click()
                # A 63-message thread: it opens at the newest message, the Reply box at hand.
                for size, (width, height) in SIZES.items():
                    page.set_viewport_size({"width": width, "height": height})
                    page.reload()
                    page.wait_for_timeout(600)
                    page.screenshot(path=str(out / f"conversation-long-thread-{size}.png"))
                page.set_viewport_size({"width": SIZES["desktop"][0], "height": SIZES["desktop"][1]})
                page.goto(f"{url}/conversations?status=open")
                page.locator(".conversations a").first.click()
                shoot(page, page.url, "conversation-open-window", out)
                page.goto(f"{url}/conversations?status=resolved")
                for link in page.locator(".conversations a").all():
                    if "+994500001026" in link.inner_text():
                        link.click()
                        break
                shoot(page, page.url, "conversation-failed", out)
                shoot(page, f"{url}/messages", "messages", out)
                shoot(page, f"{url}/usage", "usage", out)
                shoot(page, f"{url}/settings/integrations/webhooks", "settings-webhooks", out)
                shoot(page, f"{url}/settings/api-keys", "settings-api-keys", out)
                shoot(page, f"{url}/settings/inboxes", "settings-inboxes", out)
                shoot(page, f"{url}/settings/templates", "settings-templates", out)
                page.goto(f"{url}/settings/api-keys")  # a change of the dashboard's own, for the audit log
                page.get_by_label("Name").fill("zapier")
                page.get_by_role("button", name="Create API key").click()
                shoot(page, f"{url}/settings/audit", "settings-audit", out)
                # An address that does not validate (a cursor that is no number): the error page.
                shoot(page, f"{url}/settings/api-keys?before=abc", "error-invalid-address", out)
                page.goto(f"{url}/bulk/new")
                page.get_by_label("Template", exact=True).select_option(value="order_update|en")
                page.get_by_label("Phone numbers").fill(
                    "phone_number,1,2\n+994501112233,A-1001,shipped\n+994551234567,A-1002,packed\n+994500001026,A-1003,packed"
                )
                shoot_current(page, "bulk-new", out)
                page.get_by_role("button", name="Preview").click()
                shoot_current(page, "bulk-preview", out)
                # A semicolon-separated file, as Excel saves it under Azerbaijani settings, with a
                # short line and a repeated number.
                page.goto(f"{url}/bulk/new")
                page.get_by_label("Template", exact=True).select_option(value="order_update|en")
                page.get_by_label("Phone numbers").fill(
                    "phone_number;1;2\n+994501000001;A-2001;shipped\n+994501000002;A-2002\n"
                    "+994501000003;A-2003;packed\n+994501000001;A-2004;packed"
                )
                page.get_by_role("button", name="Preview").click()
                shoot_current(page, "bulk-preview-csv-problems", out)
                page.goto(f"{url}/bulk/new")
                page.get_by_label("Template", exact=True).select_option(value="order_update|en")
                page.get_by_label("Phone numbers").fill(
                    "phone_number,1,2\n+994501112233,A-1001,shipped\n+994551234567,A-1002,packed\n+994500001026,A-1003,packed"
                )
                page.get_by_role("button", name="Preview").click()
                page.get_by_role("button", name="Send batch").click()
                page.wait_for_timeout(2500)
                shoot(page, page.url, "bulk-batch", out)
                shoot(page, f"{url}/bulk", "bulk-list", out)
                # A DOCUMENT header template: a link (and a file name) for the header.
                page.goto(f"{url}/bulk/new")
                page.get_by_label("Template", exact=True).select_option(value="invoice_ready|en")
                values = page.locator("fieldset:not([hidden])")
                values.get_by_label("Header document: link (https)").fill(
                    "https://files.example.com/inv/1001.pdf"
                )
                values.get_by_label("Document's file name (optional)").fill("invoice-1001.pdf")
                values.get_by_label("Body {{1}}").fill("A-1001")
                page.get_by_label("Phone numbers").fill("+994501112233")
                shoot_current(page, "bulk-new-document", out)
                browser.close()
        finally:
            process.terminate()
            process.wait(timeout=10)
    print(f"screenshots in {out}")


if __name__ == "__main__":
    main()
