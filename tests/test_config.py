"""Settings from the environment (API.md section 10)."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from pydantic import ValidationError
from uvicorn.middleware.proxy_headers import _TrustedHosts

from wagate.core.config import Settings
from wagate.http.serving import uvicorn_options


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


def test_trusted_proxies_default_to_this_machine_and_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WAGATE_TRUSTED_PROXIES", raising=False)
    monkeypatch.delenv("WAGATE_SECURE_COOKIES", raising=False)
    settings = Settings()
    assert settings.trusted_proxies == "127.0.0.1,::1"  # uvicorn's own default
    assert settings.secure_cookies is False  # Secure as the request's scheme says
    # Networks keep their prefix only; spaces and empty items go.
    monkeypatch.setenv("WAGATE_TRUSTED_PROXIES", " 172.30.80.7/24, 10.0.0.1 ,,fd00::/8")
    assert Settings().trusted_proxies == "172.30.80.0/24,10.0.0.1,fd00::/8"
    monkeypatch.setenv("WAGATE_TRUSTED_PROXIES", "")
    assert Settings().trusted_proxies == ""  # no proxy believed
    monkeypatch.setenv("WAGATE_TRUSTED_PROXIES", "*")
    assert Settings().trusted_proxies == "*"
    for wrong, reason in [
        ("proxy.internal", "'proxy.internal' is neither an IP address nor a network"),
        ("10.0.0.0/33", "'10.0.0.0/33' is neither"),
        ("10.0.0.1,*", "give it alone"),
    ]:
        monkeypatch.setenv("WAGATE_TRUSTED_PROXIES", wrong)
        with pytest.raises(ValidationError, match=re.escape(reason)):
            Settings()


def test_uvicorn_believes_forwarded_headers_from_the_trusted_proxies_only() -> None:
    # What `wagate serve` hands uvicorn, as uvicorn's own middleware reads it (networks included).
    options = uvicorn_options(Settings(trusted_proxies="172.30.80.0/24,10.1.2.3"))
    assert options["proxy_headers"] is True
    trusted = _TrustedHosts(options["forwarded_allow_ips"])
    assert "172.30.80.1" in trusted and "10.1.2.3" in trusted
    assert "127.0.0.1" not in trusted and "172.30.81.1" not in trusted
    assert uvicorn_options(Settings(trusted_proxies=""))["proxy_headers"] is False
