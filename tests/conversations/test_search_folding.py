"""The one folding the conversation list's search uses (issue 46, point 7): what an agent types and what
is stored become the same text whatever the case and the diacritics of Azerbaijani, Turkish and Russian."""

# Names are written here as customers write them: Azerbaijani and Turkish have a dotless i.
# ruff: noqa: RUF001

from __future__ import annotations

import pytest

from wagate.conversations.search import contact_key, fold, like_pattern, phone_digits, user_id_prefix


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("ŞƏHLA", "Şəhla"),
        ("sehla", "Şəhla"),
        ("elcin", "Elçin"),
        ("ELÇİN", "Elçin"),
        ("ilkin", "İlkin"),  # Turkish capital dotted I
        ("ILGAR", "ılgar"),  # dotless i, and a capital I typed for it
        ("gunes", "Güneş"),
        ("ozturk", "ÖZTÜRK"),
        ("agdas", "Ağdaş"),
        ("ёлка", "ЕЛКА"),  # Russian ё loses its dots, in either case
        ("людмила", "ЛЮДМИЛА"),
        ("ｓｅｈｌａ", "Şəhla"),  # full-width letters, as some phone keyboards send them
    ],
)
def test_typed_and_stored_fold_alike(typed: str, stored: str) -> None:
    assert fold(typed) == fold(stored)


def test_letters_of_their_own_stay_apart() -> None:
    assert fold("Йошкар") == "йошкар"  # й is not и with a mark
    assert fold("Yusif") != fold("Yusuf")


def test_contact_key_keeps_name_and_username_on_lines_of_their_own() -> None:
    assert contact_key("Şəhla Əliyeva", "sehla_a") == "sehla eliyeva\nsehla_a"
    assert contact_key(None, None) is None


def test_numbers_user_ids_and_wildcards() -> None:
    assert phone_digits("+994 50 123-45-67") == "994501234567"
    assert phone_digits("Elçin") is None and phone_digits("12") is None
    assert user_id_prefix("az.1349") == "AZ.1349"
    assert user_id_prefix("sehla") is None
    assert like_pattern("50%_off\\") == "%50\\%\\_off\\\\%"
