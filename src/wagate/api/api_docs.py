"""`/docs` (Swagger UI) and `/redoc` (ReDoc): the API's documents, served from our own origin.

FastAPI's own pages load their scripts from a CDN, with an inline script, and send no CSP; on the
dashboard's origin a compromised CDN would run with a signed-in administrator's cookie. These pages
load Swagger UI and ReDoc from the files the `fastapi-offline` package ships (npm's builds, unchanged),
mounted at `/docs/assets`, and start them from our `/static/api-docs.js`, under the dashboard's
security headers: scripts, styles, images and requests from this origin only (docs/security.md). ReDoc
alone needs more, for its own styles and its search worker: see `redoc_headers`.
"""

from __future__ import annotations

import secrets
from html import escape
from importlib import resources
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from wagate.dashboard.web import SECURITY_HEADERS

__all__ = ["ASSETS", "ASSETS_PATH", "install_api_docs", "redoc_headers"]

# swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js (and a favicon we do not use).
ASSETS = Path(str(resources.files("fastapi_offline").joinpath("static")))
ASSETS_PATH = "/docs/assets"

_SWAGGER_UI = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{title} - Swagger UI</title>
  <link rel="icon" href="data:,">
  <link rel="stylesheet" href="{assets}/swagger-ui.css">
  <link rel="stylesheet" href="{root}/static/api-docs.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="{assets}/swagger-ui-bundle.js"></script>
  <script src="{root}/static/api-docs.js" data-openapi-url="{openapi}"></script>
</body>
</html>
"""

# ReDoc's styles are <style> elements that styled-components adds: allowed by the response's nonce,
# which api-docs.js reads from its script element and hands to ReDoc (the bundle's own start on a
# `<redoc spec-url>` element would read attributes, where the browser hides the nonce).
_REDOC = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{title} - ReDoc</title>
  <link rel="icon" href="data:,">
  <link rel="stylesheet" href="{root}/static/api-docs.css">
</head>
<body>
  <div id="redoc"></div>
  <script src="{assets}/redoc.standalone.js"></script>
  <script src="{root}/static/api-docs.js" data-openapi-url="{openapi}" nonce="{nonce}"></script>
</body>
</html>
"""


_STYLES = "style-src 'self'"
assert _STYLES in SECURITY_HEADERS["Content-Security-Policy"]
# The one <style> element ReDoc's bundle adds as it loads, before it knows the nonce (perfect-scrollbar's
# rules), by its content's hash: empty when added, then filled. Another ReDoc build may change it: the
# browser test (tests/dashboard/test_docs_pages.py) then meets the refusal.
_REDOC_STYLE_HASHES = (
    "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",
    "'sha256-QMIg+bpjm3JdElJ388KYke01izlUW0UoNOeKjpMxdgc='",
)


def redoc_headers(nonce: str) -> dict[str, str]:
    """The dashboard's headers, but for ReDoc's styles and search: <style> elements with this nonce
    (styled-components') or the hashes above, and its search index in a worker it makes from a `blob:`
    (an address only a script already running on the page can make). Scripts, requests, images and
    everything else as strict as on every page."""
    styles = " ".join((_STYLES, f"'nonce-{nonce}'", *_REDOC_STYLE_HASHES))
    policy = SECURITY_HEADERS["Content-Security-Policy"].replace(_STYLES, styles) + "; worker-src blob:"
    return {**SECURITY_HEADERS, "Content-Security-Policy": policy}


def install_api_docs(app: FastAPI) -> None:
    """`/docs`, `/redoc` and their assets; the app is made with `docs_url=None, redoc_url=None`."""
    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS), name="docs-assets")

    def page(template: str, request: Request, headers: dict[str, str], nonce: str = "") -> HTMLResponse:
        root = str(request.scope.get("root_path", ""))
        html = template.format(
            title=escape(app.title),
            root=escape(root),
            assets=escape(root + ASSETS_PATH),
            openapi=escape(root + (app.openapi_url or "/openapi.json")),
            nonce=nonce,
        )
        return HTMLResponse(html, headers=headers)

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        return page(_SWAGGER_UI, request, SECURITY_HEADERS)

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        nonce = secrets.token_urlsafe(18)  # new for every response (which no cache keeps: no-store)
        return page(_REDOC, request, redoc_headers(nonce), nonce)
