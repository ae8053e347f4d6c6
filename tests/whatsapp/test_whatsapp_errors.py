from __future__ import annotations

import pytest

from wagate.whatsapp.errors import (
    AuthError,
    InvalidParameterError,
    NotDelivered,
    RecipientError,
    TemplateError,
    ThrottlingError,
    Unconfirmed,
    UpstreamError,
    UpstreamRejected,
    error_class_for,
    error_from_response,
    is_retryable,
)


def meta_error(code: int, message: str, **extra: object) -> dict[str, object]:
    return {
        "error": {"message": message, "type": "OAuthException", "code": code, "fbtrace_id": "Ab1", **extra}
    }


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (130429, ThrottlingError),
        (131056, ThrottlingError),
        (80007, ThrottlingError),
        (4, ThrottlingError),
        (0, AuthError),
        (190, AuthError),
        (132000, TemplateError),
        (132001, TemplateError),
        (132016, TemplateError),
        (131026, RecipientError),
        (131047, RecipientError),
        (133010, RecipientError),
        (100, InvalidParameterError),
        (131008, InvalidParameterError),
        (131009, InvalidParameterError),
        (999999, UpstreamRejected),
    ],
)
def test_code_decides_the_class(code: int, cls: type[UpstreamRejected]) -> None:
    assert error_class_for(code) is cls
    # The message text must not influence the class: a misleading text changes nothing.
    err = error_from_response(400, meta_error(code, "(#1) Rate limit hit"))
    assert type(err) is cls
    assert err.code == code


def test_title_and_external_error_come_from_meta_reply() -> None:
    body = meta_error(
        132001,
        "(#132001) Template name does not exist in the translation",
        error_data={"messaging_product": "whatsapp", "details": "template name (x) does not exist in en"},
        error_subcode=2494073,
    )
    err = error_from_response(404, body)
    assert isinstance(err, TemplateError)
    assert err.title == "Template name does not exist in the translation"
    assert err.external_error == "132001: Template name does not exist in the translation"
    assert str(err) == err.external_error
    assert err.details == "template name (x) does not exist in en"
    assert err.http_status == 404
    assert err.subcode == 2494073
    assert err.fbtrace_id == "Ab1"


def test_error_user_title_wins_over_message() -> None:
    err = error_from_response(
        400, meta_error(131026, "(#131026) Receiver is incapable", error_user_title="Message undeliverable")
    )
    assert err.external_error == "131026: Message undeliverable"


def test_5xx_is_unconfirmed_whatever_the_code() -> None:
    err = error_from_response(500, meta_error(131000, "(#131000) Something went wrong"))
    assert isinstance(err, Unconfirmed)
    assert err.code == 131000
    assert not is_retryable(err)
    bare = error_from_response(503, None)
    assert isinstance(bare, Unconfirmed)
    assert bare.http_status == 503


def test_http_429_is_throttling_even_without_body_or_with_another_code() -> None:
    assert isinstance(error_from_response(429, None), ThrottlingError)
    assert isinstance(error_from_response(429, {"error": {"code": 100, "message": "x"}}), ThrottlingError)


def test_unparseable_4xx_is_a_generic_rejection() -> None:
    err = error_from_response(400, "<html>")
    assert type(err) is UpstreamRejected
    assert err.code is None
    assert err.external_error == "HTTP 400 from the WhatsApp Cloud API"


def test_retryable_only_when_no_duplicate_is_possible() -> None:
    assert is_retryable(ThrottlingError(code=130429))
    assert is_retryable(NotDelivered())
    assert not is_retryable(Unconfirmed())
    assert not is_retryable(TemplateError(code=132001))
    assert not is_retryable(RecipientError(code=131026))
    assert not is_retryable(ValueError())
    assert issubclass(NotDelivered, UpstreamError) and issubclass(Unconfirmed, UpstreamError)
    assert not issubclass(NotDelivered, UpstreamRejected)


def test_external_error_without_code_is_just_the_title() -> None:
    assert NotDelivered("Could not connect").external_error == "Could not connect"
