"""The dashboard (API.md section 12): server-rendered pages at `/`, beside the API at `/v1`."""

from __future__ import annotations

import inspect

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from wagate.core.errors import AdministratorRequired, InvalidRequest
from wagate.dashboard import (
    bulk_pages,
    conversation_pages,
    message_log,
    message_log_csv,
    settings_access,
    settings_webhooks,
    sign_in_pages,
    usage_pages,
)
from wagate.dashboard.web import STATIC, FormRefused, SignInRequired, error_page, form_refused, login_redirect

__all__ = ["install_dashboard"]

# What is not a dashboard page: the API, Meta's receiver, the API's documents.
NOT_PAGES = ("/v1/", "/webhooks/", "/openapi", "/docs", "/redoc")


class EmptyFiltersUnset:
    """A filter form submitted as a person does sends every field, those left at their default ("All
    inboxes", an empty search) as `inbox=` or `q=`: on every page that means the filter is not set.
    Dropped from a page's query before the page reads it, so no page holds the rule (and a number
    filter never refuses the form's own default)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query: bytes = scope.get("query_string", b"") if scope["type"] == "http" else b""
        if query and scope["method"] in ("GET", "HEAD") and not scope["path"].startswith(NOT_PAGES):
            fields = [field for field in query.split(b"&") if field.partition(b"=")[2]]
            scope = {**scope, "query_string": b"&".join(fields)}
        await self.app(scope, receive, send)


def install_dashboard(app: FastAPI) -> None:
    app.add_middleware(EmptyFiltersUnset)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for area in (
        sign_in_pages,
        conversation_pages,
        settings_webhooks,
        settings_access,
        message_log,
        message_log_csv,
        usage_pages,
        bulk_pages,
    ):
        app.include_router(area.router)

    @app.exception_handler(AdministratorRequired)
    async def _administrators_only(request: Request, exc: AdministratorRequired) -> Response:
        # Pages render it; the API answers its JSON error body as everywhere else.
        if request.url.path.startswith(NOT_PAGES):
            return JSONResponse(exc.body(), status_code=exc.status_code)
        return error_page(request, exc)

    api_invalid = app.exception_handlers[RequestValidationError]

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        # A page's address that does not validate (an id out of range, a cursor that is no number):
        # the error page, not the API's JSON body, which everything else still gets.
        if request.url.path.startswith(NOT_PAGES):
            answered = api_invalid(request, exc)
            return await answered if inspect.isawaitable(answered) else answered
        return error_page(
            request,
            InvalidRequest(
                "This page's address is not valid: a number or a filter in it is wrong."
                " Follow a link instead."
            ),
        )

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
