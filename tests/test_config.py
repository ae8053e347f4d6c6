"""Settings from the environment (API.md section 10)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from wagate.config import Settings


def test_sqlite_urls_are_accepted_in_both_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAGATE_DATABASE_URL", "sqlite:///data/wagate.db")
    assert Settings().database_url == "sqlite+aiosqlite:///data/wagate.db"
    monkeypatch.setenv("WAGATE_DATABASE_URL", "sqlite+aiosqlite:///data/wagate.db")
    assert Settings().database_url == "sqlite+aiosqlite:///data/wagate.db"


def test_defaults_follow_the_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WAGATE_DATABASE_URL", raising=False)
    settings = Settings()
    assert settings.database_url == "sqlite+aiosqlite:///./wagate.db"
    assert settings.graph_api_url == "https://graph.facebook.com/v23.0"
    assert settings.allow_private_urls is False
    assert settings.prices == {
        "AUTHENTICATION": Decimal("0.036"),
        "UTILITY": Decimal("0.036"),
        "MARKETING": Decimal("0.165"),
    }
    assert settings.currency == "AZN"


def test_the_price_table_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAGATE_PRICES", '{"AUTHENTICATION": "0.05", "UTILITY": "0.04", "MARKETING": "0.2"}')
    monkeypatch.setenv("WAGATE_ALLOW_PRIVATE_URLS", "true")
    settings = Settings()
    assert settings.prices["MARKETING"] == Decimal("0.2")
    assert settings.allow_private_urls is True
