"""What can go wrong when we call the Cloud API, as exception classes chosen by Meta's error code.

Meta's error messages change wording between API versions; its numeric codes do not. So the class is
picked from the code alone (one registry, below) and the text is only carried along for people.

Two outcomes are not rejections at all and decide whether a send may be repeated:

- :class:`NotDelivered`: the request certainly never reached Meta (connection refused, DNS failure,
  connect timeout, no free connection). Sending again cannot produce a duplicate.
- :class:`Unconfirmed`: the request may have reached Meta (read timeout, 5xx, unreadable reply).
  Sending again could deliver the message twice; the status webhook, which carries our message id in
  ``biz_opaque_callback_data``, settles it instead.
"""

from __future__ import annotations

import re
from typing import Any

_MESSAGE_CODE_PREFIX = re.compile(r"^\(#\d+\)\s*")


class UpstreamError(Exception):
    """Base of every Cloud API failure; ``external_error`` is what the API shows to customers."""

    retryable = False
    default_title = "WhatsApp Cloud API error"

    def __init__(
        self,
        title: str | None = None,
        *,
        code: int | None = None,
        details: str | None = None,
        http_status: int | None = None,
        subcode: int | None = None,
        fbtrace_id: str | None = None,
    ) -> None:
        self.title = title or self.default_title
        self.code = code
        self.details = details
        self.http_status = http_status
        self.subcode = subcode
        self.fbtrace_id = fbtrace_id
        super().__init__(self.external_error)

    @property
    def external_error(self) -> str:
        """``"<code>: <title>"`` (just the title when Meta gave no code)."""
        if self.code is None:
            return self.title
        return f"{self.code}: {self.title}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, title={self.title!r}, "
            f"http_status={self.http_status!r}, details={self.details!r})"
        )


class NotDelivered(UpstreamError):
    """The request never left us (or never reached Meta): safe to send again."""

    retryable = True
    default_title = "Could not reach the WhatsApp Cloud API"


class Unconfirmed(UpstreamError):
    """Meta may have accepted the message; repeating the request could send it twice."""

    default_title = "No usable reply from the WhatsApp Cloud API"


class UpstreamRejected(UpstreamError):
    """Meta answered and refused the request; also the class for codes the registry does not know."""

    default_title = "Rejected by the WhatsApp Cloud API"


class ThrottlingError(UpstreamRejected):
    """Too many requests (per number, per pair or per app); the same request may be sent later."""

    retryable = True
    default_title = "Rate limit hit"


class AuthError(UpstreamRejected):
    """The access token is invalid, expired or lacks a permission."""

    default_title = "Authorization error"


class AccountError(UpstreamRejected):
    """Meta refuses the business account or its number itself (locked, unpaid, restricted): every
    send of the channel would fail the same way until someone fixes the account."""

    default_title = "WhatsApp Business Account cannot send"


class TemplateError(UpstreamRejected):
    """The template is missing, not usable, or its parameters do not fit."""

    default_title = "Template error"


class RecipientError(UpstreamRejected):
    """The recipient cannot get this message (not on WhatsApp, window closed, number not registered)."""

    default_title = "Recipient cannot receive the message"


class InvalidParameterError(UpstreamRejected):
    """The request itself is wrong: a missing or invalid parameter."""

    default_title = "Invalid parameter"


# The one registry: Meta error code -> class. Codes from Meta's Cloud API error-code reference.
_THROTTLING = (4, 80007, 130429, 131048, 131056)
_AUTH = (0, 3, 10, 190, *range(200, 300))
# Account locked (131031), payment issue (131042), certificate (131045), temporarily blocked (368).
_ACCOUNT = (131031, 131042, 131045, 368)
_TEMPLATE = (*range(132000, 132017), 132068, 132069)
_RECIPIENT = (131021, 131026, 131047, 131049, 131050, 133010)
_INVALID_PARAMETER = (33, 100, 131008, 131009, 131051, 131052, 131053)

ERROR_CLASSES: dict[int, type[UpstreamRejected]] = {
    **dict.fromkeys(_THROTTLING, ThrottlingError),
    **dict.fromkeys(_AUTH, AuthError),
    **dict.fromkeys(_ACCOUNT, AccountError),
    **dict.fromkeys(_TEMPLATE, TemplateError),
    **dict.fromkeys(_RECIPIENT, RecipientError),
    **dict.fromkeys(_INVALID_PARAMETER, InvalidParameterError),
}


def error_class_for(code: int | None) -> type[UpstreamRejected]:
    """The class a rejection with ``code`` maps to (also useful for errors in status webhooks)."""
    if code is None:
        return UpstreamRejected
    return ERROR_CLASSES.get(code, UpstreamRejected)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def title_from_error(error: dict[str, Any]) -> str | None:
    """Meta's short title: ``error_user_title`` if given, else ``message`` without its ``(#code)``."""
    user_title = error.get("error_user_title")
    if isinstance(user_title, str) and user_title.strip():
        return user_title.strip()
    message = error.get("message")
    if isinstance(message, str) and message.strip():
        return _MESSAGE_CODE_PREFIX.sub("", message.strip()) or None
    return None


def error_from_response(http_status: int | None, body: Any) -> UpstreamError:
    """Turn a non-200 Cloud API reply into the exception it means.

    5xx is :class:`Unconfirmed` whatever the body says, because the message may still have been
    accepted; HTTP 429 is throttling even without a body; otherwise the error code decides.
    """
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {}
    code = _as_int(error.get("code"))
    title = title_from_error(error)
    error_data = error.get("error_data")
    details = error_data.get("details") if isinstance(error_data, dict) else None
    fbtrace = error.get("fbtrace_id")
    kwargs: dict[str, Any] = {
        "code": code,
        "details": details if isinstance(details, str) else None,
        "http_status": http_status,
        "subcode": _as_int(error.get("error_subcode")),
        "fbtrace_id": fbtrace if isinstance(fbtrace, str) else None,
    }
    if http_status is not None and http_status >= 500:
        return Unconfirmed(title or f"HTTP {http_status} from the WhatsApp Cloud API", **kwargs)
    cls = error_class_for(code)
    if http_status == 429 and not issubclass(cls, ThrottlingError):
        cls = ThrottlingError
    if title is None and code is None and http_status is not None and cls is UpstreamRejected:
        title = f"HTTP {http_status} from the WhatsApp Cloud API"
    return cls(title, **kwargs)


def stops_the_channel(err: BaseException) -> bool:
    """Whether the error is about the channel, not the message: its access token refused or its
    account unable to send. The channel's sends then wait (paused) instead of failing one by one."""
    return isinstance(err, AuthError | AccountError)


def is_retryable(err: BaseException) -> bool:
    """May the same request be sent again automatically (no risk of a duplicate, and likely to pass)?"""
    return isinstance(err, UpstreamError) and err.retryable
