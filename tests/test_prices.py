"""The price list setting (API.md section 14, docs/deployment.md "Prices by date"): its two forms, the
file, the default list's dates, and a bad list refused at start with the reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from wagate.core.config import Settings
from wagate.core.prices import PriceList

ENTRIES = [
    {
        "from": "2027-01-01",
        "prices": {"AUTHENTICATION": "0.04", "UTILITY": "0.05", "MARKETING": "0.2", "SESSION": "0.05"},
        "utility_free_in_window": False,
    },
    {
        "from": "2026-06-01",
        "prices": {"AUTHENTICATION": "0.03", "UTILITY": "0.03", "MARKETING": "0.1", "service": "0"},
        "utility_free_in_window": True,
    },
]


def at(prices: PriceList, moment: str) -> tuple[dict[str, int], bool]:
    entry = prices.at(datetime.fromisoformat(moment).replace(tzinfo=UTC))
    return dict(entry.micros), entry.utility_free_in_window


def test_the_default_list_charges_session_messages_from_october_2026(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WAGATE_PRICES", raising=False)
    monkeypatch.delenv("WAGATE_PRICE_LIST_FILE", raising=False)
    prices = Settings().price_list
    before = {"AUTHENTICATION": 36_000, "UTILITY": 36_000, "MARKETING": 165_000, "SESSION": 0}
    assert at(prices, "2025-07-01T00:00:00") == (before, True)
    assert at(prices, "2026-09-30T23:59:59.999999") == (before, True)
    assert at(prices, "2026-10-01T00:00:00") == ({**before, "SESSION": 36_000}, False)
    entry = prices.at(datetime(2026, 11, 29, 12, tzinfo=UTC))
    assert entry.send_micros(None, window_open=True) == 36_000  # a session message
    assert entry.send_micros("UTILITY", window_open=True) == 36_000
    assert prices.at(datetime(2026, 9, 1, tzinfo=UTC)).send_micros("UTILITY", window_open=True) == 0


def test_a_flat_table_keeps_its_rates_under_metas_dates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAGATE_PRICES", '{"authentication": "0.05", "UTILITY": "0.04", "MARKETING": "0.2"}')
    prices = Settings().price_list
    rates = {"AUTHENTICATION": 50_000, "UTILITY": 40_000, "MARKETING": 200_000}
    assert at(prices, "2026-01-01T00:00:00") == ({**rates, "SESSION": 0}, True)
    assert at(prices, "2026-10-01T00:00:00") == ({**rates, "SESSION": 40_000}, False)


def test_a_list_of_entries_in_the_environment_or_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("WAGATE_PRICES", json.dumps(ENTRIES))
    from_env = Settings().price_list
    file = tmp_path / "prices.json"
    file.write_text(json.dumps(ENTRIES))
    monkeypatch.delenv("WAGATE_PRICES")
    monkeypatch.setenv("WAGATE_PRICE_LIST_FILE", str(file))
    from_file = Settings().price_list
    for prices in (from_env, from_file):
        first = {"AUTHENTICATION": 30_000, "UTILITY": 30_000, "MARKETING": 100_000, "SESSION": 0}
        # The first entry also prices what came before its day.
        assert at(prices, "2020-01-01T00:00:00") == (first, True)
        assert at(prices, "2026-12-31T23:59:59") == (first, True)
        assert at(prices, "2027-01-01T00:00:00") == (
            {"AUTHENTICATION": 40_000, "UTILITY": 50_000, "MARKETING": 200_000, "SESSION": 50_000},
            False,
        )


@pytest.mark.parametrize(
    ("setting", "reason"),
    [
        ('{"AUTHENTICATION": "0.05", "UTILITY": "0.04"}', "missing prices for MARKETING"),
        (
            '{"AUTHENTICATION": "0.05", "UTILITY": "0.04", "MARKETING": "0.2", "PROMO": "1"}',
            "unknown category",
        ),
        ('{"AUTHENTICATION": "-1", "UTILITY": "0.04", "MARKETING": "0.2"}', "at least 0"),
        ('{"AUTHENTICATION": "0.0000001", "UTILITY": "0.04", "MARKETING": "0.2"}', "at most 6 decimals"),
        ("[]", "no entry"),
        (json.dumps([ENTRIES[0], ENTRIES[0]]), "same day"),
        (json.dumps([{**ENTRIES[0], "from": "2027-02-30"}]), "from"),
        (
            json.dumps([{k: v for k, v in ENTRIES[0].items() if k != "utility_free_in_window"}]),
            "utility_free_in_window",
        ),
        (json.dumps([{**ENTRIES[0], "prices": {"AUTHENTICATION": "1"}}]), "missing prices"),
    ],
)
def test_a_bad_list_is_refused_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, setting: str, reason: str
) -> None:
    monkeypatch.setenv("WAGATE_PRICES", setting)
    with pytest.raises(ValidationError, match=reason):
        Settings()


def test_the_file_and_the_environment_are_not_both_taken(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    file = tmp_path / "prices.json"
    file.write_text(json.dumps(ENTRIES))
    monkeypatch.setenv("WAGATE_PRICES", json.dumps(ENTRIES))
    monkeypatch.setenv("WAGATE_PRICE_LIST_FILE", str(file))
    with pytest.raises(ValidationError, match="not both"):
        Settings()
    monkeypatch.delenv("WAGATE_PRICES")
    monkeypatch.setenv("WAGATE_PRICE_LIST_FILE", str(tmp_path / "missing.json"))
    with pytest.raises(ValidationError, match="cannot read the price list file"):
        Settings()
    file.write_text("{not json")
    monkeypatch.setenv("WAGATE_PRICE_LIST_FILE", str(file))
    with pytest.raises(ValidationError, match="not a valid price list"):
        Settings()
