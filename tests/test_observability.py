"""The operator's view of real `wagate` processes (docs/operations.md, "Metrics" and "Logs"): one JSON
line per request and per send, naming the request, the message, the channel and Meta's wamid; no
secret in any line of a whole run; `/metrics` kept from the public and counting what happened; a
worker's metrics, liveness and readiness on a port of its own, on loopback.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support import gateway_process
from support.gateway_process import GatewayProcess, Provisioned, WorkerProcess, free_port
from support.harness import (
    ADMIN_TOKEN,
    AGENT_TOKEN,
    APP_SECRET,
    OTHER_TOKEN,
    OUTSIDER_TOKEN,
    REVOKED_TOKEN,
    VERIFY_TOKEN,
    Gateway,
    Simulator,
    new_number,
    post_login,
    provision_file,
    wait_for,
)
from support.receiver import Receiver

pytestmark = pytest.mark.timeout(240)

provisioned = gateway_process.provisioned
wired_simulator = gateway_process.wired_simulator

METRICS_TOKEN = "metrics-token-for-prometheus-7f3a"
CALLBACK_SECRET = "callback-secret-of-the-crm-91c2"


def metric_value(text: str, name: str, **labels: str) -> float:
    """The value of one sample of Prometheus' text format (0 when the series is absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        series, _, value = line.rpartition(" ")
        if series.split("{")[0] != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', series))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(value)
    return total


def json_lines(path: Path) -> list[dict[str, Any]]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            pytest.fail(f"a log line that is not JSON: {line[:300]!r}")
    return parsed


@pytest.fixture
def process_gateway(
    provisioned: Provisioned,
    tmp_path: Path,
    wired_simulator: Callable[[str], None],
    simulator: Simulator,
) -> Iterator[tuple[GatewayProcess, Gateway]]:
    """`wagate serve` with debug logs, events allowed to loopback, a metrics token and a metrics port."""
    env = {
        **provisioned.env,
        "WAGATE_LOG_LEVEL": "debug",
        "WAGATE_ALLOW_PRIVATE_URLS": "true",
        "WAGATE_METRICS_TOKEN": METRICS_TOKEN,
        "WAGATE_EVENT_RETRY_BASE_SECONDS": "0.5",
    }
    process = GatewayProcess(env, free_port(), tmp_path, args=("--metrics-port", str(free_port())))
    process.start()
    wired_simulator(process.url)
    ids = {"acme": provisioned.account_id, "main": provisioned.channel_id}
    with httpx.Client(timeout=10) as http:
        try:
            yield process, Gateway(process.url, http, simulator, provisioned.database_url, ids)
        finally:
            process.stop()


def test_a_whole_run_logs_one_json_line_per_request_and_per_send_and_never_a_secret(
    process_gateway: tuple[GatewayProcess, Gateway], receiver: Receiver
) -> None:
    process, gateway = process_gateway
    http = gateway.http
    # Every way a secret reaches the gateway: API keys (good, revoked, another account's, a guess),
    # Meta's app secret (signatures) and verify token (a query string), channel tokens (sent to Meta),
    # an account webhook's signing secret, a status callback's secret, dashboard passwords, the
    # metrics token, the key that encrypts at rest.
    hook = http.post(gateway.v1("/webhooks"), json={"url": receiver.url("hook")}, headers=gateway.headers())
    assert hook.status_code == 201, hook.text
    webhook_secret = hook.json()["secret"]
    callback = {"url": receiver.url("callback"), "secret": CALLBACK_SECRET, "on_change": True}
    accepted: dict[str, str] = {}  # message id -> the request id it was sent with
    for n in range(5):
        request_id = f"crm-order-{n}"
        otp = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
        body = {"phone_number": new_number(), "template": otp, "status_callback": callback}
        sent = gateway.send(body, **{"X-Request-Id": request_id})
        assert sent.status_code == 201, sent.text
        assert sent.headers["x-request-id"] == request_id
        accepted[sent.json()["id"]] = request_id
    unnamed = gateway.otp(new_number())  # no X-Request-Id: the gateway names the request
    assert unnamed.status_code == 201 and unnamed.headers["x-request-id"].startswith("req_")
    accepted[unnamed.json()["id"]] = unnamed.headers["x-request-id"]
    bulk = http.post(
        gateway.v1("/whatsapp/bulk_messages"),
        json={
            "channel_id": gateway.ids["main"],
            "template": {"name": "otp_code", "language": "en"},
            "recipients": [{"phone_number": new_number(), "parameters": [str(n)]} for n in range(3)],
        },
        headers=gateway.headers(),
    )
    assert bulk.status_code == 202, bulk.text
    guessed = "wg_a_guess_at_someone_elses_key_000"
    for token in (REVOKED_TOKEN, guessed, OTHER_TOKEN, AGENT_TOKEN, OUTSIDER_TOKEN):
        http.get(gateway.v1("/whatsapp/messages"), headers=gateway.headers(token))
    for token in (VERIFY_TOKEN, "a-wrong-verify-token"):
        http.get(
            f"{gateway.url}/webhooks/whatsapp",
            params={"hub.mode": "subscribe", "hub.verify_token": token, "hub.challenge": "42"},
        )
    with httpx.Client(base_url=gateway.url) as browser:
        assert post_login(browser, "admin@acme.test", "pw-admin").status_code == 303
        assert post_login(browser, "agent@acme.test", "a-wrong-password-x").status_code != 303
    assert http.get(f"{gateway.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).is_success

    wamids = {m: gateway.wait_status(m, "delivered", timeout=20)["upstream_message_id"] for m in accepted}
    receiver.wait("callback", 5, timeout=30)  # each of the five became delivered
    receiver.wait("hook", 1, timeout=30)
    process.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    assert process.proc.wait(timeout=30) == 0  # type: ignore[union-attr]

    log_text = process.log_path.read_text()
    secrets = {
        "API keys": [ADMIN_TOKEN, AGENT_TOKEN, OUTSIDER_TOKEN, REVOKED_TOKEN, OTHER_TOKEN, guessed],
        "Meta's app secret and verify token": [APP_SECRET, VERIFY_TOKEN, "a-wrong-verify-token"],
        "channel access tokens": [
            c["access_token"] for a in provision_file()["accounts"] for c in a["channels"]
        ],
        "webhook and callback secrets": [webhook_secret, CALLBACK_SECRET],
        "passwords": ["pw-admin", "a-wrong-password-x"],
        "the metrics token": [METRICS_TOKEN],
        "the key at rest": [process.env["WAGATE_SECRET_KEY"]],
    }
    for kind, values in secrets.items():
        for value in values:
            assert value not in log_text, f"{kind}: {value[:6]}... appears in the log"

    lines = json_lines(process.log_path)
    assert all({"timestamp", "level", "logger", "event"} <= line.keys() for line in lines)
    requests = [line for line in lines if line["event"] == "request"]
    sends = [line for line in lines if line["event"] == "send"]
    assert all(line["request_id"] and line["status"] and line["route"] for line in requests)
    accepts = {line["message_id"]: line for line in requests if line.get("message_id")}
    for message_id, request_id in accepted.items():
        accept = accepts[message_id]
        assert accept["request_id"] == request_id and accept["status"] == 201
        assert accept["channel"] == gateway.ids["main"]
        assert accept["route"] == "/v1/accounts/{account_id}/whatsapp/messages"
        [send] = [line for line in sends if line["message_id"] == message_id]
        assert send["request_id"] == request_id and send["channel"] == gateway.ids["main"]
        assert send["result"] == "sent" and send["wamid"].startswith("wamid.")
        assert send["wamid"] == wamids[message_id]
    [batch_line] = [line for line in requests if line.get("batch_id")]
    assert batch_line["request_id"] == bulk.headers["x-request-id"] and batch_line["messages"] == 3
    assert len([line for line in sends if line["request_id"] == batch_line["request_id"]]) == 3
    # Meta's subscription check carries its token in the query: only the path is logged.
    assert any(line["route"] == "/webhooks/whatsapp" and line["status"] == 200 for line in requests)


def test_metrics_are_for_the_token_holder_and_count_what_happened(
    process_gateway: tuple[GatewayProcess, Gateway], receiver: Receiver
) -> None:
    process, gateway = process_gateway
    http = gateway.http
    url = f"{gateway.url}/metrics"
    for headers in ({}, {"Authorization": "Bearer not-the-token"}, {"Authorization": METRICS_TOKEN}):
        refused = http.get(url, headers=headers)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
        assert "wagate_" not in refused.text

    def scrape() -> str:
        answer = http.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
        return answer.text

    before = scrape()
    channel = str(gateway.ids["main"])
    hook = http.post(
        gateway.v1("/webhooks"), json={"url": receiver.url("counted")}, headers=gateway.headers()
    )
    assert hook.status_code == 201
    receiver.answer("counted", 500)  # the first delivery fails, its retry succeeds
    ids = [gateway.otp(new_number()).json()["id"] for _ in range(4)]
    assert gateway.otp("+1").status_code == 422
    for message_id in ids:
        gateway.wait_status(message_id, "delivered", timeout=20)

    def grew(name: str, by: float, **labels: str) -> Callable[[], str | None]:
        def check() -> str | None:
            after = scrape()
            return (
                after
                if metric_value(after, name, **labels) - metric_value(before, name, **labels) >= by
                else None
            )

        return check

    after = wait_for(grew("wagate_event_deliveries_total", 1, result="delivered"), timeout=30)
    sends_route = "/v1/accounts/{account_id}/whatsapp/messages"
    assert (
        metric_value(after, "wagate_http_requests_total", route=sends_route, method="POST", status="201")
        - (metric_value(before, "wagate_http_requests_total", route=sends_route, method="POST", status="201"))
        == 4
    )
    assert metric_value(after, "wagate_http_requests_total", route=sends_route, status="422") >= 1
    assert (
        metric_value(after, "wagate_sends_total", channel=channel, result="sent")
        - metric_value(before, "wagate_sends_total", channel=channel, result="sent")
        == 4
    )
    assert metric_value(after, "wagate_upstream_duration_seconds_count", channel=channel) >= 4
    # Each became delivered (its "sent" changes nothing: it is sent once Meta takes it).
    assert (
        metric_value(after, "wagate_status_webhooks_applied_total")
        - metric_value(before, "wagate_status_webhooks_applied_total")
        >= 4
    )
    assert metric_value(after, "wagate_event_deliveries_total", result="failed") >= 1
    assert metric_value(after, "wagate_channel_rate_limit", channel=channel) == 80
    assert "wagate_http_request_duration_seconds_bucket" in after and "process_cpu_seconds_total" in after
    assert re.search(r"^wagate_outbox_depth\{channel=\"\",lane=\"\w+\"\} \d", after, re.M), after

    # A backlog shows in the outbox gauges: the channel throttled by Meta keeps its sends waiting.
    listener = f"http://127.0.0.1:{process.args[1]}"
    gateway.sim.configure(fail_next={"count": 1, "code": 130429})
    waiting = [gateway.otp(new_number()).json()["id"] for _ in range(3)]

    def backlog() -> str | None:
        page = http.get(f"{listener}/metrics").text
        return (
            page
            if metric_value(page, "wagate_outbox_depth", lane="send_message", channel=channel) >= 1
            else None
        )

    page = wait_for(backlog, timeout=10)
    assert metric_value(page, "wagate_outbox_oldest_age_seconds", lane="send_message", channel=channel) >= 0
    for message_id in waiting:  # the throttle passes and the backlog drains
        gateway.wait_status(message_id, "delivered", timeout=90)
    assert http.get(f"{listener}/readyz").json()["status"] == "ready"
    assert http.get(f"{listener}/healthz").json() == {"status": "ok"}


def test_a_worker_shows_its_metrics_health_and_readiness_on_its_own_port_on_loopback(
    provisioned: Provisioned, tmp_path: Path
) -> None:
    if not provisioned.database_url.startswith("postgresql"):
        pytest.skip("workers run beside API processes on PostgreSQL only")
    env = provisioned.env
    port = free_port()
    worker = WorkerProcess(env, tmp_path)
    worker.command = lambda: ["worker", "--metrics-port", str(port)]  # type: ignore[method-assign]
    worker.start()
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(timeout=5) as http:
            wait_for(lambda: _answers(http, f"{base}/readyz"), timeout=15, what="the worker's /readyz")
            ready = http.get(f"{base}/readyz").json()
            assert ready == {"status": "ready", "schema": ready["schema"], "dispatcher": "running"}
            assert http.get(f"{base}/healthz").json() == {"status": "ok"}
            page = http.get(f"{base}/metrics").text
            assert "wagate_sends_total" in page and "wagate_outbox_depth" in page
            assert http.get(f"{base}/v1/accounts/1/whatsapp/messages").status_code == 404  # nothing else
        # Bound to loopback only (WAGATE_METRICS_HOST): the port is not open on the machine's addresses.
        listening = Path("/proc/net/tcp").read_text() + Path("/proc/net/tcp6").read_text()
        bound = [
            line.split()[1] for line in listening.splitlines()[1:] if line.split()[1].endswith(f":{port:04X}")
        ]
        assert bound and all(address.startswith("0100007F") for address in bound), bound
        worker.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        assert worker.proc.wait(timeout=30) == 0  # type: ignore[union-attr]
    finally:
        worker.stop()
    assert all(line["level"] for line in json_lines(worker.log_path))


def _answers(http: httpx.Client, url: str) -> bool:
    try:
        return http.get(url).status_code == 200
    except httpx.TransportError:
        time.sleep(0.1)
        return False
