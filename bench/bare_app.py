"""The framework's ceiling: a bare FastAPI endpoint that parses the same body as a send and answers 201.

Served the way `wagate serve` serves the gateway (`uvicorn.run(app, host=..., port=..., log_level=...)`,
one process, uvicorn's defaults otherwise: uvloop and httptools from uvicorn[standard]), so the only
difference between the two figures is what the gateway does per request.

    python bench/bare_app.py --port 8200
"""

from __future__ import annotations

import argparse
import itertools
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args()
    uvicorn.run(create_bare_app(), host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
