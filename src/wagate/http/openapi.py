"""What `/openapi.json` says about errors: API.md's one error body, and the statuses each operation returns.

Every `/v1` operation lists its error statuses with `errors(...)`, so the schema, `/docs` and a client
generated from them name the same body (`ErrorBody`) for every one.
"""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute
from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    field: str = Field(examples=["limit"])
    issue: str = Field(examples=["must be from 1 to 200"])


class ErrorInfo(BaseModel):
    code: str = Field(description="Which rule; stable, for programs.", examples=["invalid_request"])
    message: str = Field(description="For people; may change.", examples=["The request is not valid."])
    details: list[ErrorDetail] | None = Field(
        default=None, description="For `invalid_request`: the fields and what is wrong with each."
    )


class ErrorBody(BaseModel):
    """The body of every error (API.md, Conventions)."""

    error: ErrorInfo


# Each status's usual description and example; an operation may say more with `errors(404=...)`.
_STANDARD: dict[int, tuple[str, str, str]] = {
    401: ("Missing, unknown or revoked API key", "unauthorized", "A valid API key is required."),
    403: (
        "The key belongs to another account, or its user may not use this resource",
        "forbidden",
        "This API key may not use this resource.",
    ),
    404: ("Nothing with this id in the account", "not_found", "Nothing exists at this address."),
    409: (
        "The Idempotency-Key is in use by a request still running, or was used with another body",
        "idempotency_key_in_use",
        "A request with this Idempotency-Key is still being processed.",
    ),
    413: ("The request body is too large", "payload_too_large", "The request body is too large."),
    422: (
        "The request is not valid; `error.code` says which rule, `details` names the fields",
        "invalid_request",
        "The request is not valid: limit: must be from 1 to 200.",
    ),
    429: (
        "Too many requests with this API key (`api_key_requests_per_second`), or a full queue; see"
        " `Retry-After`",
        "rate_limited",
        "Too many requests; retry after the time in Retry-After.",
    ),
    503: (
        "The database cannot be reached, or the gateway is starting or stopping; retry after `Retry-After`",
        "not_ready",
        "The service is starting or shutting down; retry shortly.",
    ),
}


def errors(
    *statuses: int, codes: dict[int, tuple[str, str]] | None = None, **descriptions: str
) -> dict[int | str, dict[str, Any]]:
    """The `responses` of an operation's error statuses, each with `ErrorBody` and an example.

    `descriptions` overrides a status's description by keyword (`_404="Unknown channel"`), `codes` the
    example's code and message (`{404: ("channel_not_found", "No channel ...")}`)."""
    responses: dict[int | str, dict[str, Any]] = {}
    if 401 in statuses and 429 not in statuses:
        statuses = (*statuses, 429)  # every request with an API key counts against the key's rate
    for status in statuses:
        description, code, message = _STANDARD[status]
        description = descriptions.get(f"_{status}", description)
        code, message = (codes or {}).get(status, (code, message))
        example: dict[str, Any] = {"code": code, "message": message}
        if status == 422:
            example["details"] = [{"field": "limit", "issue": "must be from 1 to 200"}]
        responses[status] = {
            "model": ErrorBody,
            "description": description,
            "content": {"application/json": {"example": {"error": example}}},
        }
    return responses


CHANNEL_NOT_FOUND = ("channel_not_found", "No channel with this id exists in the account.")
MESSAGE_NOT_FOUND = ("message_not_found", "No message with this id exists in the account.")
BATCH_NOT_FOUND = (
    "batch_not_found",
    "No batch with this id exists in the account (batches are kept 7 days).",
)
WEBHOOK_NOT_FOUND = ("webhook_not_found", "No webhook with this id exists in the account.")
ADMINISTRATOR_REQUIRED = ("administrator_required", "Only an administrator may do this.")


def operation_id(route: APIRoute) -> str:
    """The operation's id: its function's name (short, snake_case, no path), unless it names one."""
    return route.name
