"""Phone numbers: accepted as E.164 or digits with the country code, always returned as E.164."""

from __future__ import annotations

from functools import lru_cache

import phonenumbers

from wagate.core.errors import InvalidPhoneNumber

# Numbers recently checked, valid or not. Checking one with libphonenumber's rules costs about 25 us
# of CPU, 7 % of an accepted send's, and senders mostly write to the customers they wrote to before
# (an OTP at each login, an agent's replies). Only texts as long as a written-out number are kept,
# so the cache stays under ~4 MB (about 200 bytes an entry) whatever a client posts.
RECENT_NUMBERS = 16_384
LONGEST_CACHED_TEXT = 32


def _e164(text: str) -> str | None:
    """`text` (stripped, non-empty) in E.164, or None when it is not a valid number."""
    candidate = text if text.startswith("+") else "+" + text
    try:
        parsed = phonenumbers.parse(candidate, None)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_valid_number(parsed):
        return None
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


_recent_e164 = lru_cache(maxsize=RECENT_NUMBERS)(_e164)


def normalize_phone_number(raw: object, *, field: str = "phone_number") -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidPhoneNumber(details=[{"field": field, "issue": "must be a phone number string"}])
    text = raw.strip()
    e164 = _recent_e164(text) if len(text) <= LONGEST_CACHED_TEXT else _e164(text)
    if e164 is None:
        raise InvalidPhoneNumber(
            f"'{text}' is not a valid phone number: give it in E.164, like +994501234567.",
            details=[{"field": field, "issue": "not a valid phone number"}],
        )
    return e164


def whatsapp_digits(e164: str) -> str:
    """The Cloud API's `to`: the number's digits without '+'."""
    return e164.removeprefix("+")
