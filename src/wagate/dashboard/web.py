"""What every dashboard page needs: templates, the session cookie, CSRF, forms and error pages.

The dashboard holds no rule of its own: pages call the same service functions as the API, with the
signed-in user's `Principal`, and render what they return (or the error they raise).
"""

from __future__ import annotations

import hmac
import secrets
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from wagate.accounts.access import get_gateway
from wagate.accounts.service import SessionUser, session_user
from wagate.channels.service import paused_channels
from wagate.core.db import isoformat
from wagate.core.errors import WagateError
from wagate.dashboard import views
from wagate.dashboard.views import duration, error_words, failure_name, variable_label
from wagate.http.limits import CONTROL_CHARACTER, CONTROL_CHARACTER_ISSUE
from wagate.runtime.gateway import Gateway

HERE = Path(__file__).parent
STATIC = HERE / "static"
# The cookies' base names: set, read and deleted through `set_cookie`, `read_cookie` and `delete_cookie`,
# which name them `__Host-<base>` when they are Secure (`cookie_name`).
SESSION_COOKIE = "wagate_session"
# Before signing in there is no session: the sign-in form's token is checked against this cookie.
LOGIN_CSRF_COOKIE = "wagate_login_csrf"
SECURE_COOKIE_PREFIX = "__Host-"
MAX_FORM_BYTES = 64 * 1024
# Pages load only our own files: no inline script, nothing from elsewhere.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; media-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

templates = Environment(
    loader=FileSystemLoader(HERE / "page_templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters["iso"] = lambda value: isoformat(value) if isinstance(value, datetime) else value
templates.filters["variable_label"] = variable_label
templates.filters["duration"] = duration  # the window's time left, on the list as on the thread
# One name for each failure and pages' errors in words, wherever a template shows them.
templates.filters["failure_name"] = lambda value: str(failure_name(value) or "")
templates.filters["error_words"] = error_words


class SignInRequired(Exception):
    """No valid session: a page redirects to the sign-in form, a fragment or a stream answers 401."""


class FormRefused(Exception):
    """A POST without the session's CSRF token (or with a body that is no form): 403, nothing changes."""


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    context.setdefault("user", getattr(request.state, "user", None))
    context.setdefault("paused", getattr(request.state, "paused", []))
    context.setdefault("path", request.url.path)
    html = templates.get_template(template).render(request=request, **context)
    return HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)


def error_page(request: Request, error: WagateError) -> HTMLResponse:
    return render(request, "error.html", status_code=error.status_code, error=error)


def form_refused(request: Request, exc: Exception) -> HTMLResponse:
    """A form whose CSRF token or session does not hold (`FormRefused`): 403, in words."""
    return render(request, "error.html", status_code=403, error=views.Refusal(str(exc)))


def secure_cookies(request: Request) -> bool:
    """Cookies are `Secure` when the browser reached us over https (directly or through a proxy of
    WAGATE_TRUSTED_PROXIES, whose X-Forwarded-Proto uvicorn believes), and always with
    WAGATE_SECURE_COOKIES."""
    return request.url.scheme == "https" or get_gateway(request).settings.secure_cookies


def cookie_name(request: Request, base: str) -> str:
    """The name a cookie has in this request: `__Host-<base>` when it is Secure. A browser takes a
    `__Host-` cookie only when Secure, with Path=/ and no Domain, so neither a plain-http page nor a
    sibling subdomain can plant or overwrite it (a fixed session, a known CSRF token). Reading uses
    the same rule: a Secure request never takes the cookie by its bare name."""
    return SECURE_COOKIE_PREFIX + base if secure_cookies(request) else base


def read_cookie(request: Request, base: str) -> str | None:
    """The value of the cookie `base` (SESSION_COOKIE, LOGIN_CSRF_COOKIE) under its name in this request."""
    return request.cookies.get(cookie_name(request, base))


def set_cookie(response: Response, request: Request, base: str, value: str, max_age: int) -> None:
    """Set the cookie `base` under its name in this request: HttpOnly, SameSite=Lax, Path=/, no
    Domain, and Secure as `secure_cookies` says."""
    response.set_cookie(
        cookie_name(request, base),
        value,
        max_age=max_age,
        httponly=True,
        samesite="lax",
        secure=secure_cookies(request),
        path="/",
    )


def delete_cookie(response: Response, request: Request, base: str) -> None:
    """Delete the cookie `base`: with the attributes it was set with, since a browser ignores a
    `__Host-` cookie's deletion without Secure."""
    response.delete_cookie(
        cookie_name(request, base), path="/", secure=secure_cookies(request), httponly=True, samesite="lax"
    )


async def current_user(request: Request) -> SessionUser:
    """The signed-in user (kept on `request.state.user` for the templates), or SignInRequired."""
    token = read_cookie(request, SESSION_COOKIE)
    gateway: Gateway = get_gateway(request)
    user = await session_user(gateway, token) if token else None
    if user is None:
        raise SignInRequired()
    request.state.user = user
    # The health banner of every page: inboxes whose sends wait because Meta refuses the channel.
    async with gateway.db.read() as session:
        request.state.paused = await paused_channels(session, principal=user.principal)
    return user


async def current_administrator(request: Request) -> SessionUser:
    """The signed-in user when an administrator (settings pages); 403 `administrator_required` else."""
    user = await current_user(request)
    user.principal.require_administrator()
    return user


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the last value of each), at most MAX_FORM_BYTES."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise FormRefused("not a form")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormRefused("the form is too large")
    try:
        fields = parse_qs(body.decode(), keep_blank_values=True, max_num_fields=200)
    except (UnicodeDecodeError, ValueError):
        raise FormRefused("not a form") from None
    return checked_fields({name: values[-1] for name, values in fields.items()})


def checked_fields(fields: dict[str, str]) -> dict[str, str]:
    """The fields of a form, refused when one holds a control character: the API's rule for strings
    (wagate.http.limits), which also keeps NUL, which PostgreSQL refuses in text, out of the services."""
    for name, value in fields.items():
        if CONTROL_CHARACTER.search(name) or CONTROL_CHARACTER.search(value):
            raise FormRefused(f"{name[:50]}: {CONTROL_CHARACTER_ISSUE}")
    return fields


def check_csrf(given: str | None, expected: str | None) -> None:
    if not given or not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        raise FormRefused("the form's security token is missing or wrong: reload the page and try again")


async def posted_form(request: Request, user: SessionUser) -> dict[str, str]:
    """The fields of a form a signed-in user posted, its CSRF token checked (or FormRefused)."""
    form = await read_form(request)
    check_csrf(form.get("csrf_token") or request.headers.get("x-csrf-token"), user.csrf_token)
    return form


def new_login_csrf() -> str:
    return secrets.token_urlsafe(32)


def login_redirect(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of ours only (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/conversations"
    return target
