"""`GET /v1/accounts/{account_id}/usage` (API.md section 11, issue 12 point 5) over HTTP, both databases.

Real sends through the simulator: an OTP (AUTHENTICATION), order_update (UTILITY; charged in the
customer's window too since 2026-10-01), spring_sale (MARKETING), a session text after the customer
wrote and an agent's reply from the dashboard, a bulk batch, a send the simulator fails with 131026,
and a UTILITY template Meta charged as MARKETING. The report must add up exactly to the messages'
own `cost.amount`.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import httpx
import pytest

from support.app_in_thread import running_gateway, sql
from support.harness import (
    AGENT_TOKEN,
    MAIN,
    OTHER_TOKEN,
    OUTSIDER_TOKEN,
    REVOKED_TOKEN,
    Gateway,
    Simulator,
    new_number,
    wait_for,
)

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
ORDER = {"name": "order_update", "language": "en", "parameters": ["A-1", "shipped"]}
SALE = {"name": "spring_sale", "language": "en", "parameters": ["20%", "20%", "spring"]}
UNDELIVERABLE = "+994500001026"
FINAL = ("delivered", "read", "failed")
BAKU = timezone(timedelta(hours=4))


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    """On PostgreSQL the database's sessions are in Baku's time (UTC+4), not UTC: usage days must be
    UTC days all the same."""
    if not database_url.startswith("sqlite"):
        name = database_url.rsplit("/", 1)[1]
        sql(database_url, f"ALTER DATABASE \"{name}\" SET timezone TO 'Asia/Baku'")
        assert sql(database_url, "SHOW timezone") == [("Asia/Baku",)]
    with running_gateway(database_url, simulator) as running:
        yield running


@dataclass(frozen=True)
class Traffic:
    main: list[str]  # message ids on the Main channel
    second: list[str]  # on the Second channel
    failed: str
    recategorised: str

    @property
    def all(self) -> list[str]:
        return self.main + self.second


def usage(
    gateway: Gateway, token: str | None = None, account_id: int | None = None, **params: Any
) -> httpx.Response:
    headers = gateway.headers(token) if token else gateway.headers()
    accept = params.pop("accept", None)
    if accept:
        headers["Accept"] = accept
    query = {key.rstrip("_"): value for key, value in params.items()}
    return gateway.http.get(
        f"{gateway.url}/v1/accounts/{account_id or gateway.ids['acme']}/usage", params=query, headers=headers
    )


def settled(gateway: Gateway, message_id: str) -> dict[str, Any]:
    """The message once Meta's statuses (and their pricing) arrived."""

    def final() -> dict[str, Any] | None:
        message = gateway.message(message_id)
        return message if message["status"] in FINAL else None

    return wait_for(final, what=f"message {message_id} to be delivered or failed")


def sent(response: httpx.Response) -> str:
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    return message_id


def agent_reply(gateway: Gateway, conversation_id: int) -> str:
    """The agent answers in the dashboard (a session message sent by a person); its message id."""
    with httpx.Client(base_url=gateway.url) as browser:
        login = browser.get("/login").text
        token = re.search(r'name="csrf_token" value="([^"]+)"', login)
        assert token is not None
        form = {"email": "agent@acme.test", "password": "pw-agent", "csrf_token": token.group(1), "next": "/"}
        assert browser.post("/login", data=form).status_code == 303
        page = browser.get(f"/conversations/{conversation_id}").text
        token = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert token is not None
        reply = {"text": "An agent here: it left the warehouse.", "csrf_token": token.group(1)}
        assert browser.post(f"/conversations/{conversation_id}/reply", data=reply).status_code == 303
    found = sql(
        gateway.database_url,
        "SELECT id FROM messages WHERE conversation_id = :id AND agent_user_id IS NOT NULL",
        id=conversation_id,
    )
    assert len(found) == 1
    message_id: str = found[0][0]
    return message_id


def bulk_send(gateway: Gateway, numbers: list[str]) -> list[str]:
    """An OTP to each number as a bulk batch; the ids of its messages."""
    accepted = gateway.http.post(
        gateway.v1("/whatsapp/bulk_messages"),
        json={"channel_id": gateway.ids["main"], "template": OTP, "phone_numbers": numbers},
        headers=gateway.headers(),
    )
    assert accepted.status_code == 202, accepted.text
    url = gateway.v1(f"/whatsapp/bulk_messages/{accepted.json()['batch_id']}")

    def completed() -> list[str] | None:
        batch = gateway.http.get(url, headers=gateway.headers()).json()
        ids = [r["message_id"] for r in batch["recipients"] if r["message_id"]]
        return ids if batch["status"] == "completed" and len(ids) == len(numbers) else None

    return wait_for(completed, what="the batch to be sent")


@pytest.fixture(scope="module")
def traffic(gateway: Gateway) -> Traffic:
    main = [sent(gateway.otp(new_number())), sent(gateway.otp(UNDELIVERABLE))]
    main.append(sent(gateway.send({"phone_number": new_number(), "template": ORDER})))
    main.append(sent(gateway.send({"phone_number": new_number(), "template": SALE})))
    # A customer writes: the reply is a session message and a UTILITY template goes in the open window;
    # since 2026-10-01 both cost the utility rate (the default price list, API.md section 14).
    customer = new_number()
    gateway.sim.inbound(MAIN["phone_number_id"], customer, "Where is my order?")
    wait_for(
        lambda: gateway.http.get(
            gateway.v1("/whatsapp/messages/window"),
            params={"channel_id": gateway.ids["main"], "phone_number": customer},
            headers=gateway.headers(),
        ).json()["open"],
        what="the customer's window to open",
    )
    session_text = sent(gateway.send({"phone_number": customer, "text": "It ships today."}))
    main.append(session_text)
    main.append(sent(gateway.send({"phone_number": customer, "template": ORDER})))
    main.append(agent_reply(gateway, gateway.message(session_text)["conversation"]["id"]))
    main.extend(bulk_send(gateway, [new_number(), new_number()]))
    second = [
        sent(
            gateway.send({"channel_id": gateway.ids["second"], "phone_number": new_number(), "template": OTP})
        )
    ]
    for message_id in main + second:
        settled(gateway, message_id)
    # Meta recategorises a UTILITY template and charges it as MARKETING.
    gateway.sim.configure(auto_statuses=False)
    try:
        recategorised = sent(gateway.send({"phone_number": new_number(), "template": ORDER}))
        wamid = wait_for(lambda: gateway.message(recategorised)["upstream_message_id"], what="its wamid")
        gateway.sim.http.post(
            f"{gateway.sim.url}/_sim/statuses",
            json={
                "phone_number_id": MAIN["phone_number_id"],
                "wamid": wamid,
                "status": "delivered",
                "pricing_category": "marketing",
            },
        ).raise_for_status()
        wait_for(
            lambda: gateway.message(recategorised)["cost"]["category"] == "MARKETING",
            what="Meta's category to be applied",
        )
    finally:
        gateway.sim.configure(auto_statuses=True)
    main.append(recategorised)
    return Traffic(main=main, second=second, failed=main[1], recategorised=recategorised)


def expected_rows(gateway: Gateway, message_ids: list[str]) -> list[dict[str, Any]]:
    """The rows as the messages themselves say: by created_at's UTC day, channel and category."""
    groups: dict[tuple[str, int, str], list[Any]] = defaultdict(lambda: [0, 0, Decimal(0)])
    for message_id in message_ids:
        message = gateway.message(message_id)
        key = (message["created_at"][:10], message["channel_id"], message["cost"]["category"] or "SESSION")
        groups[key][0] += 1
        groups[key][1] += message["status"] == "failed"
        groups[key][2] += Decimal(message["cost"]["amount"])
    order = {"AUTHENTICATION": 0, "UTILITY": 1, "MARKETING": 2, "SESSION": 3}
    return [
        {
            "date": day,
            "channel_id": channel_id,
            "category": category,
            "messages": messages,
            "failed": failed,
            "amount": format(amount.normalize(), "f"),
        }
        for (day, channel_id, category), (messages, failed, amount) in sorted(
            groups.items(), key=lambda item: (item[0][0], item[0][1], order[item[0][2]])
        )
    ]


def days_of(gateway: Gateway, message_ids: list[str]) -> tuple[str, str]:
    days = sorted(gateway.message(m)["created_at"][:10] for m in message_ids)
    return days[0], days[-1]


def test_rows_add_up_exactly_to_the_messages_costs(gateway: Gateway, traffic: Traffic) -> None:
    first, last = days_of(gateway, traffic.all)
    response = usage(gateway, from_=first, to=last)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["currency"] == "AZN" and (body["from"], body["to"]) == (first, last)
    assert body["data"] == expected_rows(gateway, traffic.all)
    assert all(row["messages"] > 0 for row in body["data"])
    # The figures, whatever the days: 11 sends, 1 failed; on Main 0.036 (OTP) + 0 (failed OTP) + 0.036
    # (order outside the window) + 0.165 (sale) + 0.036 (session text) + 0.036 (order in the window)
    # + 0.036 (the agent's reply) + 2 x 0.036 (bulk OTPs) + 0.165 (order charged as MARKETING), on
    # Second 0.036 (OTP): the prices since 2026-10-01. The customer's own message is not counted.
    assert body["total"] == {"messages": 11, "failed": 1, "amount": "0.618"}
    by_key: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    amounts: dict[tuple[int, str], Decimal] = defaultdict(Decimal)
    for row in body["data"]:
        key = (row["channel_id"], row["category"])
        by_key[key][0] += row["messages"]
        by_key[key][1] += row["failed"]
        amounts[key] += Decimal(row["amount"])
    main, second = gateway.ids["main"], gateway.ids["second"]
    assert dict(by_key) == {
        (main, "AUTHENTICATION"): [4, 1],
        (main, "UTILITY"): [2, 0],
        (main, "MARKETING"): [2, 0],
        (main, "SESSION"): [2, 0],
        (second, "AUTHENTICATION"): [1, 0],
    }
    assert amounts == {
        (main, "AUTHENTICATION"): Decimal("0.108"),
        (main, "UTILITY"): Decimal("0.072"),
        (main, "MARKETING"): Decimal("0.330"),
        (main, "SESSION"): Decimal("0.072"),
        (second, "AUTHENTICATION"): Decimal("0.036"),
    }
    assert gateway.message(traffic.failed)["external_error"].startswith("131026")
    # The recategorised send counts as MARKETING, though its template is UTILITY.
    recategorised = gateway.message(traffic.recategorised)
    assert recategorised["template"]["category"] == "UTILITY" and recategorised["cost"]["amount"] == "0.165"


def test_the_default_period_is_the_last_30_days_up_to_today(gateway: Gateway, traffic: Traffic) -> None:
    before = datetime.now(UTC).date()
    body = usage(gateway).json()
    after = datetime.now(UTC).date()
    assert body["to"] in (before.isoformat(), after.isoformat())
    assert date.fromisoformat(body["to"]) - date.fromisoformat(body["from"]) == timedelta(days=29)
    assert body["total"]["messages"] >= 1
    # `to` alone: the 30 days up to it; `from` alone: up to today.
    alone = usage(gateway, to="2026-03-31").json()
    assert (alone["from"], alone["to"]) == ("2026-03-02", "2026-03-31")
    since = usage(gateway, from_=(before - timedelta(days=3)).isoformat()).json()
    assert since["to"] in (before.isoformat(), after.isoformat())


def set_created_at(gateway: Gateway, message_id: str, at: datetime) -> None:
    """Move a message in time, as if it had been sent then (UTC)."""
    if gateway.database_url.startswith("sqlite"):
        # As wagate.core.tables.UTCDateTime stores it on SQLite: naive UTC text with microseconds.
        stored = at.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
        sql(
            gateway.database_url,
            "UPDATE messages SET created_at = :at WHERE id = :id",
            at=stored,
            id=message_id,
        )
    else:
        sql(
            gateway.database_url,
            "UPDATE messages SET created_at = CAST(:at AS TIMESTAMP WITH TIME ZONE) WHERE id = :id",
            at=at.isoformat(),
            id=message_id,
        )


def test_days_are_utc_days_and_both_ends_are_included(gateway: Gateway, traffic: Traffic) -> None:
    late, early = sent(gateway.otp(new_number())), sent(gateway.otp(new_number()))
    settled(gateway, late)
    settled(gateway, early)
    day = datetime.now(UTC).date() - timedelta(days=100)
    next_day = day + timedelta(days=1)
    # The last microsecond of a UTC day, and the first of the next in UTC (written as Baku's 04:00):
    # on PostgreSQL, whose sessions here are in Baku's time, each day must be taken in UTC.
    set_created_at(gateway, late, datetime(day.year, day.month, day.day, 23, 59, 59, 999999, tzinfo=UTC))
    midnight = datetime(next_day.year, next_day.month, next_day.day, tzinfo=UTC)
    set_created_at(gateway, early, midnight.astimezone(BAKU))
    main = gateway.ids["main"]

    def rows(first: date, last: date) -> list[tuple[str, int, str, int, int, str]]:
        body = usage(gateway, from_=first.isoformat(), to=last.isoformat()).json()
        return [
            (r["date"], r["channel_id"], r["category"], r["messages"], r["failed"], r["amount"])
            for r in body["data"]
        ]

    assert rows(day, day) == [(day.isoformat(), main, "AUTHENTICATION", 1, 0, "0.036")]
    assert rows(next_day, next_day) == [(next_day.isoformat(), main, "AUTHENTICATION", 1, 0, "0.036")]
    assert rows(day, next_day) == [
        (day.isoformat(), main, "AUTHENTICATION", 1, 0, "0.036"),
        (next_day.isoformat(), main, "AUTHENTICATION", 1, 0, "0.036"),
    ]
    # No rows for days without messages, and the totals of nothing.
    empty = usage(
        gateway, from_=(day - timedelta(days=10)).isoformat(), to=(day - timedelta(days=1)).isoformat()
    )
    assert empty.json()["data"] == []
    assert empty.json()["total"] == {"messages": 0, "failed": 0, "amount": "0"}
    # 366 days, both ends included, is the most.
    longest = usage(gateway, from_=(next_day - timedelta(days=365)).isoformat(), to=next_day.isoformat())
    assert longest.status_code == 200 and longest.json()["total"]["messages"] == 2


def error_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code and error["message"]
    return error


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"from_": "2026-13-01"}, "from"),
        ({"to": "2026-02-30"}, "to"),
        ({"from_": "yesterday"}, "from"),
        ({"to": "20261101"}, "to"),
        ({"from_": "2026-11-02", "to": "2026-11-01"}, "from"),
        ({"from_": "2025-01-01", "to": "2026-01-02"}, "to"),  # 367 days
        ({"from_": "1969-12-31"}, "from"),
        ({"channel_id": "0"}, "channel_id"),
        ({"channel_id": "main"}, "channel_id"),
        ({"channel_id": str(2**63)}, "channel_id"),
    ],
)
def test_invalid_periods_and_channel_ids_name_the_field(
    gateway: Gateway, params: dict[str, str], field: str
) -> None:
    error = error_of(usage(gateway, None, None, **params), 422, "invalid_request")
    assert [detail["field"] for detail in error["details"]] == [field]


def test_keys_accounts_and_channels(gateway: Gateway, traffic: Traffic) -> None:
    url = f"{gateway.url}/v1/accounts/{gateway.ids['acme']}/usage"
    error_of(gateway.http.get(url), 401, "unauthorized")
    error_of(usage(gateway, REVOKED_TOKEN), 401, "unauthorized")
    error_of(usage(gateway, OTHER_TOKEN), 403, "forbidden")  # another account's key
    error_of(usage(gateway, account_id=gateway.ids["globex"]), 403, "forbidden")
    error_of(usage(gateway, account_id=987654), 403, "forbidden")  # no such account: no probing
    error_of(usage(gateway, channel_id=gateway.ids["globex_channel"]), 404, "channel_not_found")
    error_of(usage(gateway, channel_id=987654), 404, "channel_not_found")


def test_agents_see_only_their_inboxes_channels(gateway: Gateway, traffic: Traffic) -> None:
    first, last = days_of(gateway, traffic.all)
    main, second = gateway.ids["main"], gateway.ids["second"]
    agent = usage(gateway, AGENT_TOKEN, from_=first, to=last).json()  # Main only
    assert agent["data"] == expected_rows(gateway, traffic.main)
    assert {row["channel_id"] for row in agent["data"]} == {main}
    outsider = usage(gateway, OUTSIDER_TOKEN, from_=first, to=last).json()  # Second only
    assert outsider["data"] == expected_rows(gateway, traffic.second)
    assert outsider["total"] == {"messages": 1, "failed": 0, "amount": "0.036"}
    error_of(usage(gateway, AGENT_TOKEN, channel_id=second), 403, "forbidden")
    # The channel filter, for an administrator and for the member.
    only_second = usage(gateway, from_=first, to=last, channel_id=second).json()
    assert only_second["data"] == outsider["data"]
    assert usage(gateway, OUTSIDER_TOKEN, from_=first, to=last, channel_id=second).json() == only_second


def test_administrators_see_every_channel_of_the_account(gateway: Gateway, traffic: Traffic) -> None:
    first, last = days_of(gateway, traffic.all)
    second = gateway.ids["second"]
    expected = expected_rows(gateway, traffic.second)
    admin = sql(gateway.database_url, "SELECT id FROM users WHERE email = 'admin@acme.test'")[0][0]
    sql(
        gateway.database_url,
        "DELETE FROM channel_members WHERE channel_id = :channel AND user_id = :user",
        channel=second,
        user=admin,
    )
    try:
        body = usage(gateway, from_=first, to=last, channel_id=second).json()
        assert body["data"] == expected
    finally:
        sql(
            gateway.database_url,
            "INSERT INTO channel_members (channel_id, user_id) VALUES (:channel, :user)",
            channel=second,
            user=admin,
        )


def test_csv_has_the_same_rows_with_a_header_line(gateway: Gateway, traffic: Traffic) -> None:
    first, last = days_of(gateway, traffic.all)
    as_json = usage(gateway, from_=first, to=last).json()
    response = usage(gateway, from_=first, to=last, accept="text/csv")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert "Accept" in response.headers["vary"]
    lines = response.text.split("\r\n")
    assert lines[0] == "date,channel_id,category,messages,failed,amount" and lines[-1] == ""
    parsed = list(csv.DictReader(io.StringIO(response.text)))
    assert [
        {
            **row,
            "channel_id": int(row["channel_id"]),
            "messages": int(row["messages"]),
            "failed": int(row["failed"]),
        }
        for row in parsed
    ] == as_json["data"]
    # CSV only when asked for before JSON.
    assert usage(gateway, accept="application/json").headers["content-type"].startswith("application/json")
    assert (
        usage(gateway, accept="text/csv;q=0.5, application/json")
        .headers["content-type"]
        .startswith("application/json")
    )
    assert usage(gateway, accept="text/csv, */*;q=0.8").headers["content-type"].startswith("text/csv")
    # Errors keep the JSON error body.
    error_of(usage(gateway, accept="text/csv", from_="nope"), 422, "invalid_request")


def test_openapi_describes_the_operation(gateway: Gateway) -> None:
    spec = gateway.http.get(f"{gateway.url}/openapi.json").json()
    operation = spec["paths"]["/v1/accounts/{account_id}/usage"]["get"]
    assert operation["operationId"] == "get_usage" and operation["description"]
    assert {"200", "401", "403", "404", "422"} <= set(operation["responses"])
    assert "text/csv" in operation["responses"]["200"]["content"]
    error_schema = operation["responses"]["422"]["content"]["application/json"]["schema"]["$ref"]
    assert error_schema.endswith("/ErrorBody")
    assert {p["name"] for p in operation["parameters"]} >= {"from", "to", "channel_id"}
