"""One exception base for everything the API reports; one handler renders API.md's error body."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


class WagateError(Exception):
    status_code = 500
    code = "internal_error"
    message = "Something went wrong on our side."

    def __init__(
        self,
        message: str | None = None,
        *,
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.message = message or self.message
        self.details = details
        self.headers = headers
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        return {"error": error}


class Unauthorized(WagateError):
    status_code = 401
    code = "unauthorized"
    message = "A valid API key is required: send it as 'Authorization: Bearer <key>'."


class WrongCredentials(Unauthorized):
    code = "wrong_credentials"
    message = "The email or the password is wrong."


class Forbidden(WagateError):
    status_code = 403
    code = "forbidden"
    message = "This API key may not use this resource."


class AdministratorRequired(WagateError):
    status_code = 403
    code = "administrator_required"
    message = "Only an administrator may do this."


class NotFound(WagateError):
    status_code = 404
    code = "not_found"
    message = "Nothing exists at this address."


class ChannelNotFound(NotFound):
    code = "channel_not_found"
    message = "No channel with this id exists in the account."


class MessageNotFound(NotFound):
    code = "message_not_found"
    message = "No message with this id exists in the account."


class BatchNotFound(NotFound):
    code = "batch_not_found"
    message = "No batch with this id exists in the account (batches are kept 7 days)."


class ConversationNotFound(NotFound):
    code = "conversation_not_found"
    message = "No conversation with this id exists in the account."


class UserNotFound(NotFound):
    code = "user_not_found"
    message = "No user with this id exists in the account."


class ApiKeyNotFound(NotFound):
    code = "api_key_not_found"
    message = "No API key with this id exists in the account."


class WebhookNotFound(NotFound):
    code = "webhook_not_found"
    message = "No webhook with this id exists in the account."


class DeliveryNotFound(NotFound):
    code = "delivery_not_found"
    message = "No delivery with this id exists for the webhook."


class MethodNotAllowed(WagateError):
    status_code = 405
    code = "method_not_allowed"
    message = "This method is not allowed here."


class Conflict(WagateError):
    status_code = 409
    code = "conflict"


class IdempotencyKeyInUse(Conflict):
    code = "idempotency_key_in_use"
    message = "A request with this Idempotency-Key is still being processed; retry shortly."


class ApiKeyNameTaken(Conflict):
    code = "api_key_name_taken"
    message = "This user already has an API key with this name."


class WebhookDisabled(Conflict):
    code = "webhook_disabled"
    message = "The webhook is disabled; enable it before re-delivering its events."


class PayloadTooLarge(WagateError):
    status_code = 413
    code = "payload_too_large"
    message = "The request body is too large."


class NotHttp(WagateError):
    """Bytes that are no HTTP request (answered by the server itself, before any route)."""

    status_code = 400
    code = "invalid_request"
    message = "The request is not valid HTTP (a broken request line or header)."


class RequestTimeout(WagateError):
    status_code = 408
    code = "request_timeout"
    message = "The request did not arrive in time."


class HeadersTooLarge(WagateError):
    status_code = 431
    code = "headers_too_large"
    message = "The request's headers are too large."


class Unprocessable(WagateError):
    status_code = 422
    code = "invalid_request"
    message = "The request is not valid."


class InvalidRequest(Unprocessable):
    pass


def invalid_json(exc: Exception | None = None) -> InvalidRequest:
    """422 for a body that is not JSON, or one the parser gave up on (`exc`: a ValueError other than
    a syntax error, or a RecursionError)."""
    message = "The request body is not valid JSON."
    if exc is not None and not isinstance(exc, json.JSONDecodeError):
        message = "The request body is not valid JSON (too deeply nested, a number too long, or not UTF-8)."
    return InvalidRequest(message, details=[{"field": "body", "issue": "not valid JSON"}])


def invalid_fields(errors: Sequence[Any]) -> InvalidRequest:
    """422 `invalid_request` for pydantic's errors of a request, each field named in `details` (a
    request checked by FastAPI, whose locations start with `body` or `query`, or by a model directly)."""
    details = []
    for error in errors:
        location = [
            str(part) for part in error.get("loc", ()) if part not in ("body", "query", "path", "header")
        ]
        if error.get("type") == "json_invalid":
            return invalid_json()
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        details.append({"field": ".".join(location) or "body", "issue": message})
    summary = "; ".join(f"{d['field']}: {d['issue']}" for d in details)
    return InvalidRequest("The request is not valid: " + summary, details=details)


class InvalidPhoneNumber(Unprocessable):
    code = "invalid_phone_number"
    message = "The phone number is not a valid number."


class WindowClosed(Unprocessable):
    code = "window_closed"
    message = (
        "The 24-hour window is closed for this number: send a template, or text with a fallback_template."
    )


class MarketingPreferenceStopped(Unprocessable):
    code = "marketing_preference_stopped"
    message = (
        "The customer stopped marketing messages from this channel: a MARKETING template is not sent to"
        " them until they resume (Meta would refuse it with error 131050)."
    )


class PhoneNumberRequired(Unprocessable):
    code = "phone_number_required"
    message = (
        "An AUTHENTICATION template goes only to a phone number, and this customer's number is not known:"
        " Meta refuses authentication templates addressed by user id."
    )


class TemplateNotFound(Unprocessable):
    code = "template_not_found"
    message = "No template with this name and language exists for the channel."


class TemplateNotApproved(Unprocessable):
    code = "template_not_approved"
    message = "The template is not approved by WhatsApp yet."


class TemplateParametersMismatch(Unprocessable):
    code = "template_parameters_mismatch"
    message = "The parameters do not match the template's variables."


class TooManyRecipients(Unprocessable):
    code = "too_many_recipients"
    message = "A batch takes at most 1000 recipients."


class IdempotencyKeyReused(Unprocessable):
    code = "idempotency_key_reused"
    message = "This Idempotency-Key was used with a different request body."


class InvalidUrl(Unprocessable):
    code = "invalid_url"
    message = "The URL is not allowed."


class RateLimited(WagateError):
    status_code = 429
    code = "rate_limited"
    message = "Too many requests; retry after the time in Retry-After."


class SignInThrottled(RateLimited):
    message = "Too many failed sign-ins: wait a moment and try again."


class PasswordChecksBusy(RateLimited):
    message = "Too many sign-ins at this moment: try again in a second."


class NotReady(WagateError):
    status_code = 503
    code = "not_ready"
    message = "The service is starting or shutting down; retry shortly."
