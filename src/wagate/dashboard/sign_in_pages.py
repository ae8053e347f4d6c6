"""The dashboard's sign-in (API.md section 12): the login form, signing in and out; `/` leads to the
conversations. Routes, labels and `data-` attributes are a contract: browser tests outside the project
rely on them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from wagate.accounts.access import GatewayDep
from wagate.accounts.service import SESSION_LIFETIME, SessionUser, sign_in, sign_out
from wagate.core.errors import WagateError
from wagate.dashboard.web import (
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    check_csrf,
    current_user,
    delete_cookie,
    new_login_csrf,
    posted_form,
    read_cookie,
    read_form,
    render,
    safe_next,
    set_cookie,
)

router = APIRouter(include_in_schema=False)
User = Annotated[SessionUser, Depends(current_user)]


@router.get("/")
async def home() -> RedirectResponse:
    return RedirectResponse("/conversations", status_code=303)


@router.get("/login")
async def login_form(request: Request, next: str | None = None) -> HTMLResponse:
    token = new_login_csrf()
    response = render(request, "login.html", csrf_token=token, next=safe_next(next), email="")
    set_cookie(response, request, LOGIN_CSRF_COOKIE, token, max_age=3600)
    return response


@router.post("/login")
async def login(request: Request, gateway: GatewayDep) -> Response:
    form = await read_form(request)
    check_csrf(form.get("csrf_token"), read_cookie(request, LOGIN_CSRF_COOKIE))
    target = safe_next(form.get("next"))
    client = request.client.host if request.client else "unknown"
    try:
        signed_in = await sign_in(
            gateway,
            email=form.get("email", ""),
            password=form.get("password", ""),
            client=client,
        )
    except WagateError as error:
        token = new_login_csrf()
        response = render(
            request,
            "login.html",
            status_code=error.status_code,
            csrf_token=token,
            next=target,
            email=form.get("email", ""),
            error=error.message,
        )
        response.headers.update(error.headers or {})  # Retry-After of a throttled sign-in
        set_cookie(response, request, LOGIN_CSRF_COOKIE, token, max_age=3600)
        return response
    signed = RedirectResponse(target, status_code=303)
    set_cookie(signed, request, SESSION_COOKIE, signed_in.token, int(SESSION_LIFETIME.total_seconds()))
    delete_cookie(signed, request, LOGIN_CSRF_COOKIE)
    return signed


@router.post("/logout")
async def logout(request: Request, gateway: GatewayDep, user: User) -> RedirectResponse:
    await posted_form(request, user)
    token = read_cookie(request, SESSION_COOKIE)
    if token:
        await sign_out(gateway, token)
    response = RedirectResponse("/login", status_code=303)
    delete_cookie(response, request, SESSION_COOKIE)
    return response
