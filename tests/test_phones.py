"""Phone numbers: the recently checked ones are answered from memory, the same as the first time, and
what a client can make the gateway keep in memory stays bounded."""

from __future__ import annotations

import pytest

from wagate.core import phones
from wagate.core.errors import InvalidPhoneNumber


def test_a_number_checked_again_gets_the_first_answer() -> None:
    for _ in range(2):
        assert phones.normalize_phone_number("994 50 123 45 67") == "+994501234567"
        with pytest.raises(InvalidPhoneNumber):
            phones.normalize_phone_number("+99455123")


def test_long_texts_are_checked_but_never_kept() -> None:
    kept_before = phones._recent_e164.cache_info().currsize
    for n in range(50):
        text = f"+994501234567 {'x' * 200} {n}"
        with pytest.raises(InvalidPhoneNumber):
            phones.normalize_phone_number(text)
    assert phones._recent_e164.cache_info().currsize == kept_before


def test_the_memory_of_numbers_is_bounded() -> None:
    for n in range(phones.RECENT_NUMBERS + 100):
        phones.normalize_phone_number(f"+99450{n:07d}")
    assert phones._recent_e164.cache_info().currsize == phones.RECENT_NUMBERS
