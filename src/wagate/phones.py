"""Phone numbers: accepted as E.164 or digits with the country code, always returned as E.164."""

from __future__ import annotations

import phonenumbers

from wagate.errors import InvalidPhoneNumber


def normalize_phone_number(raw: object, *, field: str = "phone_number") -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidPhoneNumber(details=[{"field": field, "issue": "must be a phone number string"}])
    text = raw.strip()
    candidate = text if text.startswith("+") else "+" + text
    try:
        parsed = phonenumbers.parse(candidate, None)
    except phonenumbers.NumberParseException:
        parsed = None
    if parsed is None or not phonenumbers.is_valid_number(parsed):
        raise InvalidPhoneNumber(
            f"'{text}' is not a valid phone number: give it in E.164, like +994501234567.",
            details=[{"field": field, "issue": "not a valid phone number"}],
        )
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


def whatsapp_digits(e164: str) -> str:
    """The Cloud API's `to`: the number's digits without '+'."""
    return e164.removeprefix("+")
