"""The framework's ceiling: a bare FastAPI endpoint that parses the same body as a send and answers 201.

Served the way `wagate serve` serves the gateway (`uvicorn.run(app, host=..., port=..., log_level=...)`,
one process, uvicorn's defaults otherwise: uvloop and httptools from uvicorn[standard]), so the only
difference between the two figures is what the gateway does per request.

    python bench/bare_app.py --port 8200
"""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt


class TemplateRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=512)
    language: str = Field(min_length=1, max_length=20)
    parameters: list[Any] | dict[str, Any] | None = None


class SendBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    channel_id: StrictInt
    phone_number: str | StrictInt
    template: TemplateRef | None = None


def create_bare_app() -> FastAPI:
    # Configured as `wagate serve` configures its app (WAGATE_OPENTELEMETRY's default: off).
    app = FastAPI(title="bare", telemetry={"tracing": False, "metrics": False, "logs": False})
    ids = itertools.count(1)

    @app.post("/v1/accounts/{account_id}/whatsapp/messages", status_code=201)
    async def send(account_id: int, body: SendBody) -> JSONResponse:
        return JSONResponse(
            {"id": f"msg_{next(ids):026d}", "sent_as": "template", "status": "sent"}, status_code=201
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def create_raw_app() -> Any:
    """The same endpoint without any framework: a plain ASGI callable that reads the body, parses it
    with the standard library and answers the same 201 (bench/floor.py: what serving a request costs
    before any framework or application code)."""
    ids = itertools.count(1)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["method"] == "POST":
            json.loads(body)
            status, answer = 201, b'{"id":"msg_%026d","sent_as":"template","status":"sent"}' % next(ids)
        else:
            status, answer = 200, b'{"status":"ok"}'
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--raw", action="store_true", help="no framework: a plain ASGI callable")
    args = parser.parse_args()
    app = create_raw_app() if args.raw else create_bare_app()
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
