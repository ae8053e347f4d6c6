"""The dashboard (API.md section 12): server-rendered pages at `/`, beside the API at `/v1`."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from wagate.accounts.service import SignInThrottle
from wagate.dashboard.routes import form_refused, router
from wagate.dashboard.web import STATIC, FormRefused, SignInRequired, login_redirect

__all__ = ["install_dashboard"]


def install_dashboard(app: FastAPI) -> None:
    app.state.sign_in_throttle = SignInThrottle()
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(router)

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, _: SignInRequired) -> Response:
        # A page goes to the sign-in form and back; a part fetched by a page or a stream gets 401.
        wants_page = request.headers.get("sec-fetch-dest", "document") == "document"
        if request.method == "GET" and wants_page and request.url.path != "/live":
            return login_redirect(request)
        return Response(status_code=401)

    @app.exception_handler(FormRefused)
    async def _refused(request: Request, exc: FormRefused) -> HTMLResponse:
        return form_refused(request, exc)
