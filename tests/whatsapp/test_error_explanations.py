"""Plain-language explanations of Meta's error codes for the dashboard, and reading the code back from a
message's stored `external_error`."""

from __future__ import annotations

import dataclasses

import pytest

from wagate.dispatch.unsettled import UNCONFIRMED_ERROR
from wagate.whatsapp.errors import (
    ERROR_CLASSES,
    AuthError,
    TemplateError,
    error_class_for,
    error_from_response,
    is_retryable,
)
from wagate.whatsapp.explanations import (
    EXPLANATIONS,
    RETRIED,
    Explanation,
    code_of,
    explain,
    explain_external_error,
)

# The codes the dashboard must explain: issue 11 names the first five, the rest are the ones agents
# meet most (Meta's error-code reference).
REQUIRED = [
    131026, 131047, 131049, 132000, 190,
    130429, 131000, 131005, 131008, 131009, 131021, 131031, 131042, 131048, 131050, 131051, 131052,
    131053, 131056, 132001, 132005, 132007, 132012, 132015, 132016, 133010, 135000, 131062, 368, 4,
    80007, 100, 10, 200,
]  # fmt: skip


@pytest.mark.parametrize("code", REQUIRED)
def test_every_required_code_has_a_title_cause_and_fix(code: int) -> None:
    explanation = explain(code)
    assert explanation is not None
    assert explanation.code == code
    for text in (explanation.title, explanation.cause, explanation.fix):
        assert text.strip() == text and len(text) > 5
        assert str(code) not in text  # the page shows the code itself
    assert explanation.cause.endswith(".") and explanation.fix.endswith(".")
    assert explanation.cause != explanation.fix


def test_the_fixes_of_the_codes_chatwoot_users_ask_about() -> None:
    window = explain(131047)
    assert window is not None and "24 hours" in window.cause and "template" in window.fix
    held_back = explain(131049)
    assert held_back is not None and "marketing" in held_back.cause and "again right away" in held_back.fix
    mismatch = explain(132000)
    assert mismatch is not None and "wagate templates sync" in mismatch.fix
    token = explain(190)
    assert token is not None and "access token" in token.cause and "Administrator" in token.fix


def test_an_explanation_is_a_frozen_value() -> None:
    explanation = explain(131026)
    assert explanation is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        explanation.fix = "x"  # type: ignore[misc]
    assert explanation == Explanation(explanation.code, explanation.title, explanation.cause, explanation.fix)


def test_the_permission_range_shares_one_explanation() -> None:
    base = explain(200)
    other = explain(273)
    assert base is not None and other is not None
    assert other.code == 273
    assert (other.title, other.cause, other.fix) == (base.title, base.cause, base.fix)
    assert explain(300) is None


def test_unknown_codes_have_no_explanation() -> None:
    for code in (-1, 5, 99999, 131999, 2494055):
        assert explain(code) is None


def test_codes_are_read_from_stored_external_errors() -> None:
    assert code_of("131026: Message undeliverable") == 131026
    assert code_of("  190: Access token has expired") == 190
    assert code_of("190 - Error validating access token: Session has expired") == 190
    assert code_of("4") == 4
    assert code_of(UNCONFIRMED_ERROR) is None
    assert code_of("upstream_unconfirmed: WhatsApp neither accepted nor rejected the message") is None
    assert code_of("expired: not sent within its time") is None
    assert code_of("marketing_preference_stopped") is None
    assert code_of("Rejected by the WhatsApp Cloud API") is None
    assert code_of("") is None
    assert code_of(None) is None


def test_explain_external_error() -> None:
    explanation = explain_external_error("131047: Re-engagement message")
    assert explanation is not None and explanation.code == 131047
    assert explain_external_error("131049: This message was not delivered to maintain healthy ecosystem") == (
        explain(131049)
    )
    assert explain_external_error("99999: Something new") is None
    assert explain_external_error(UNCONFIRMED_ERROR) is None
    assert explain_external_error(None) is None


def test_what_the_gateway_stores_for_a_rejection_is_explained() -> None:
    body = {"error": {"message": "(#131047) Re-engagement message", "type": "OAuthException", "code": 131047}}
    stored = error_from_response(400, body).external_error
    assert stored == "131047: Re-engagement message"
    explanation = explain_external_error(stored)
    assert explanation is not None and explanation.code == 131047


def test_the_error_classes_and_the_explanations_agree() -> None:
    # Every code errors.py names is explained (132000-132016 is a range there; Meta documents only some).
    for code in ERROR_CLASSES:
        if not 132000 <= code <= 132016:
            assert explain(code) is not None, code
    # The fix says the gateway retried exactly for the codes it retries.
    for code, explanation in EXPLANATIONS.items():
        retried = is_retryable(error_class_for(code)())
        assert (RETRIED in explanation.fix) == retried, code
    # Token and permission codes are the administrator's to fix; template codes name templates.
    for code, explanation in EXPLANATIONS.items():
        cls = error_class_for(code)
        if issubclass(cls, AuthError):
            assert "Administrator" in explanation.fix, code
        if issubclass(cls, TemplateError):
            assert (
                "template" in (explanation.title + explanation.cause).lower() or "Flow" in explanation.title
            )
