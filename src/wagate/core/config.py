"""The one settings class: every knob comes from the environment with the `WAGATE_` prefix."""

from __future__ import annotations

import ipaddress
from decimal import Decimal
from functools import lru_cache
from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from wagate.core.prices import SPEC_PRICES, PriceList, PriceListEntry, price_list_from, read_price_list_file

DEFAULT_PRICES = SPEC_PRICES


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WAGATE_", extra="ignore")

    database_url: str = "sqlite+aiosqlite:///./wagate.db"
    graph_api_url: str = "https://graph.facebook.com/v23.0"
    meta_app_secret: str = ""
    meta_verify_token: str = ""
    allow_private_urls: bool = False
    # Keys for encrypting channel access tokens and webhook/callback secrets at rest: Fernet keys,
    # comma-separated, the first encrypts and all decrypt (a rotation adds one first, runs
    # `wagate secrets rotate`, then drops the old one). Empty: a key file beside the database is
    # created on first use, so the embedded default needs no set-up.
    secret_key: str = ""
    # The price list by date, in `currency` (wagate/core/prices.py, docs/deployment.md "Prices by date"):
    # a list of entries `{"from": "YYYY-MM-DD", "prices": {...}, "utility_free_in_window": bool}`, or a
    # flat table of the template categories' rates, which follows Meta's dates (session messages are
    # charged from 2026-10-01). `price_list_file` names a JSON file of the same forms instead.
    prices: dict[str, Decimal] | list[PriceListEntry] = Field(
        default_factory=lambda: {k: Decimal(v) for k, v in DEFAULT_PRICES.items()}
    )
    price_list_file: str | None = None
    # Resolved once here, so a send only picks the entry of its day.
    _price_list: PriceList = PrivateAttr()
    currency: str = "AZN"
    # How long a send whose outcome is unknown (the process died mid-call) waits for Meta's status
    # webhook before it is sent again; Meta reports `sent` within seconds of accepting a message.
    unconfirmed_send_grace_seconds: float = 60.0
    # A channel Meta refuses (its token, its account) is paused: one probe send every this many seconds
    # until Meta takes it again (docs/operations.md).
    channel_probe_seconds: float = Field(60.0, gt=0)
    template_sync_interval_seconds: float = 3600.0
    idempotency_ttl_seconds: int = 24 * 3600
    # Timeout for one call to the Cloud API.
    upstream_timeout_seconds: float = 15.0
    # How the pacing counts a send (outbox/limiter.py). Unset: from Meta's answer, which keeps the
    # channel's limit whatever the delays, and costs it rate / (1 + Meta's answer time). Set: from the
    # request's write plus this, when the answer is slower, assuming a request reaches Meta within that.
    upstream_receipt_margin_seconds: float | None = Field(None, ge=0, le=1)
    # An account webhook is disabled once its attempts have failed, with no success between, at
    # least this many times and for at least this long (the reason is recorded on the webhook).
    webhook_disable_after_failures: int = Field(100, ge=1)
    webhook_disable_after_seconds: float = Field(5 * 24 * 3600.0, ge=0)
    # The first delay between attempts of an event delivery (the next ones grow 6-fold). Tests
    # shorten it; API.md promises the first retry within 10 s and the second within 60 s.
    event_retry_base_seconds: float = Field(5.0, gt=0, le=8)
    # An event delivery claimed by a process that died is posted again after this (a POST takes at
    # most 10 s, so at least 15). Crash tests shorten it.
    event_lease_seconds: float = Field(60.0, ge=15)
    # Finished deliveries and their attempts stay readable this long, then a periodic job purges them.
    delivery_retention_days: int = Field(7, ge=1)
    # A batch is refused (429 `rate_limited`, with Retry-After) while the channel's bulk sends still
    # waiting, with the new batch's, would take longer than this at its messages_per_second: a queue
    # that would deliver "urgent" news hours late is better refused. Single sends are never refused.
    bulk_backlog_max_seconds: float = Field(4 * 3600.0, gt=0)
    # The largest request body taken, counted while it streams in (413 `payload_too_large` beyond):
    # for the API and the dashboard, and for Meta's webhooks (a POST may batch many changes).
    max_request_bytes: int = Field(1024 * 1024, ge=1024)
    max_webhook_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    # Slow clients (docs/security.md): the request line and headers must arrive within
    # `header_timeout_seconds` of the connection or of the request's first byte and hold at most
    # `max_header_bytes` (408 / 431); a body must arrive within `body_timeout_seconds` once read.
    header_timeout_seconds: float = Field(10.0, gt=0)
    max_header_bytes: int = Field(16 * 1024, ge=1024)
    body_timeout_seconds: float = Field(30.0, gt=0)
    # Requests per second of one API key in one process, with bursts of `api_key_burst` (429
    # `rate_limited` with Retry-After beyond; 0 turns it off). Meta takes at most 1000 messages a
    # second from a number, and a batch carries 1000 recipients in one request: normal use stays below.
    api_key_requests_per_second: float = Field(1000.0, ge=0)
    api_key_burst: int = Field(2000, ge=1)
    log_level: str = "info"
    # `json`: one object per line (docs/operations.md, "Logs"); `text`: the same lines for a terminal.
    log_format: Literal["json", "text"] = "json"
    # Prometheus metrics (docs/operations.md, "Metrics"). `GET /metrics` on the API's port answers only
    # with `Authorization: Bearer <metrics_token>` (404 while it is empty), so it is not public by
    # default; `metrics_port` (or `--metrics-port`) opens a listener of its own instead, on
    # `metrics_host`, with /metrics, /healthz and /readyz: what a worker, which has no API port, offers.
    metrics_token: str = ""
    metrics_port: int | None = Field(None, ge=1, le=65535)
    metrics_host: str = "127.0.0.1"
    # FastAPI's native OpenTelemetry (traces, metrics, logs through the global providers). Off by
    # default: even unconfigured it looks the providers up on every request.
    opentelemetry: bool = False
    # The proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (docs/security.md): addresses
    # and networks (CIDR), comma-separated, or `*` for any peer; empty: none. A request from one of
    # them takes the client address (the sign-in throttle counts per address) and the scheme (cookies
    # are Secure over https) that the proxy forwards; from any other peer the headers are ignored.
    # The default is uvicorn's: a proxy on the same machine.
    trusted_proxies: str = "127.0.0.1,::1"
    # `true`: the dashboard's cookies are always `Secure` (and named `__Host-...`), even for a request
    # that reached the gateway over plain http (TLS ended by a proxy that is not trusted).
    # `false`: Secure when the request came over https, directly or through a trusted proxy.
    secure_cookies: bool = False

    @field_validator("database_url")
    @classmethod
    def _normalise_sqlite_url(cls, value: str) -> str:
        # API.md accepts `sqlite:///path` as the same as `sqlite+aiosqlite:///path`.
        if value.startswith("sqlite:"):
            return "sqlite+aiosqlite:" + value.removeprefix("sqlite:")
        if value.startswith(("postgresql://", "postgres://")):
            return "postgresql+psycopg://" + value.split("://", 1)[1]
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_trusted_proxies(cls, value: str) -> str:
        return ",".join(trusted_proxy_list(value))

    @model_validator(mode="after")
    def _resolve_price_list(self) -> Settings:
        if self.price_list_file:
            if "prices" in self.model_fields_set:
                raise ValueError("set WAGATE_PRICES or WAGATE_PRICE_LIST_FILE, not both")
            self._price_list = read_price_list_file(self.price_list_file)
        else:
            self._price_list = price_list_from(self.prices)
        return self

    @property
    def price_list(self) -> PriceList:
        return self._price_list

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def trusted_proxy_list(value: str) -> list[str]:
    """WAGATE_TRUSTED_PROXIES as uvicorn takes it (`forwarded_allow_ips`): each item an address or a
    network, checked here, since uvicorn would take a misspelt one as a name no peer ever has and
    trust no one without a word. A network keeps only its prefix (`10.0.0.7/8` is `10.0.0.0/8`)."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if "*" in items:
        if len(items) > 1:
            raise ValueError("WAGATE_TRUSTED_PROXIES: `*` trusts every peer, give it alone")
        return items
    checked = []
    for item in items:
        try:
            if "/" in item:
                checked.append(str(ipaddress.ip_network(item, strict=False)))
            else:
                checked.append(str(ipaddress.ip_address(item)))
        except ValueError:
            raise ValueError(
                f"WAGATE_TRUSTED_PROXIES: {item[:60]!r} is neither an IP address nor a network (CIDR, e.g. "
                "172.18.0.0/16); give them separated by commas, `*` for any peer, or nothing for none"
            ) from None
    return checked


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
