"""What a process counts for Prometheus (docs/operations.md, "Metrics"; the list for Grafana is in
docs/deployment.md).

One `Metrics` per process, with a registry of its own rather than prometheus-client's global one: tests
run several gateways in one process, and each must count only its own. Counters and histograms are
bumped where things happen (a request ends, a send's outcome is recorded, a status is applied, an event
is posted); the gauges that describe state (outbox depth and age, each channel's rate in use) are read
when Prometheus scrapes, so the hot path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Seconds. Requests: an accepted send takes a few milliseconds, a page tens; Meta answers a send in
# about 0.1-0.5 s and the client gives up after `upstream_timeout_seconds` (15 s by default).
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
UPSTREAM_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0)

# The label of a request no route matched: the path itself would let any client mint new series.
UNMATCHED_ROUTE = "unmatched"


@dataclass(frozen=True)
class LaneDepth:
    """What waits in one outbox lane: `lane` is the job kind (`send` for sends, with their channel)."""

    lane: str
    channel: str
    depth: int
    oldest_age_seconds: float


@dataclass(frozen=True)
class ChannelRate:
    channel: str
    used: int  # sends in the last second, as the channel's limiter counts them
    limit: int


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # The process's CPU, memory and open files, and the collector's passes, as every exporter has.
        ProcessCollector(registry=r)
        GCCollector(registry=r)
        self.requests = Counter(
            "wagate_http_requests",
            "HTTP requests answered, by route template, method and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "wagate_http_request_duration_seconds",
            "Time from a request's arrival to its answer's last byte, by route template.",
            ["route"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.sends = Counter(
            "wagate_sends",
            "Calls to the Cloud API for a message, by channel and result: sent (Meta took it), failed "
            "(Meta refused it), retry (Meta did not get it: sent again), unconfirmed (no answer: "
            "settled by a status webhook), held (Meta refuses the channel: paused).",
            ["channel", "result"],
            registry=r,
        )
        self.upstream_seconds = Histogram(
            "wagate_upstream_duration_seconds",
            "Time the Cloud API took to answer a send, by channel.",
            ["channel"],
            buckets=UPSTREAM_BUCKETS,
            registry=r,
        )
        self.statuses_applied = Counter(
            "wagate_status_webhooks_applied",
            "Message statuses from Meta's webhooks applied to messages.",
            registry=r,
        )
        self.event_deliveries = Counter(
            "wagate_event_deliveries",
            "Attempts to deliver an event (account webhook or status callback), by result: delivered "
            "(2xx), failed (any other answer, or none).",
            ["result"],
            registry=r,
        )
        self.outbox_depth = Gauge(
            "wagate_outbox_depth",
            "Rows waiting in the outbox, by lane (the job kind; `send` with its channel).",
            ["lane", "channel"],
            registry=r,
        )
        self.outbox_oldest_age = Gauge(
            "wagate_outbox_oldest_age_seconds",
            "How long the oldest row that is due has waited since it became due, by lane.",
            ["lane", "channel"],
            registry=r,
        )
        self.event_backlog = Gauge(
            "wagate_event_deliveries_backlog",
            "Event deliveries waiting to be posted or retried.",
            registry=r,
        )
        self.rate_used = Gauge(
            "wagate_channel_rate_used",
            "Sends in the last second of each channel this process's dispatcher paces.",
            ["channel"],
            registry=r,
        )
        self.rate_limit = Gauge(
            "wagate_channel_rate_limit",
            "Each paced channel's limit: messages per second.",
            ["channel"],
            registry=r,
        )

        # The series of the hot path, by their labels: `labels()` costs more than the count itself.
        self._request_series: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._send_series: dict[tuple[int, str], tuple[Any, Any]] = {}

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        series = self._request_series.get(key)
        if series is None:
            series = self._request_series[key] = (
                self.requests.labels(route, method, str(status)),
                self.request_seconds.labels(route),
            )
        series[0].inc()
        series[1].observe(seconds)

    def send(self, channel_id: int, result: str, upstream_seconds: float | None) -> None:
        """A call to Meta for a message ended with `result`; `upstream_seconds`: how long Meta took to
        answer, None when the request never reached the wire."""
        key = (channel_id, result)
        series = self._send_series.get(key)
        if series is None:
            channel = str(channel_id)
            series = self._send_series[key] = (
                self.sends.labels(channel, result),
                self.upstream_seconds.labels(channel),
            )
        series[0].inc()
        if upstream_seconds is not None:
            series[1].observe(upstream_seconds)

    def set_outbox(self, lanes: Iterable[LaneDepth], event_backlog: int) -> None:
        # Cleared first: a lane that emptied since the last scrape must read 0, not its old value.
        self.outbox_depth.clear()
        self.outbox_oldest_age.clear()
        for lane in lanes:
            self.outbox_depth.labels(lane.lane, lane.channel).set(lane.depth)
            self.outbox_oldest_age.labels(lane.lane, lane.channel).set(lane.oldest_age_seconds)
        self.event_backlog.set(event_backlog)

    def set_channel_rates(self, rates: Iterable[ChannelRate]) -> None:
        self.rate_used.clear()  # channels another process took over are no longer this one's
        self.rate_limit.clear()
        for rate in rates:
            self.rate_used.labels(rate.channel).set(rate.used)
            self.rate_limit.labels(rate.channel).set(rate.limit)

    def render(self) -> bytes:
        return generate_latest(self.registry)
