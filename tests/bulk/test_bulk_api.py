"""API.md sections 6-7: bulk sends over real HTTP, with the simulator as Meta."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select
from standardwebhooks import Webhook

from support.app_in_thread import running_gateway
from support.harness import (
    ADMIN_TOKEN,
    AGENT_TOKEN,
    OTHER_TOKEN,
    OUTSIDER_TOKEN,
    Gateway,
    Simulator,
    new_number,
    provision_file,
    wait_for,
)
from support.receiver import Receiver
from wagate.bulk.models import Batch, BatchRecipient
from wagate.bulk.repository import purge_expired_batches
from wagate.core.db import Database, utcnow

OTP = {"name": "otp_code", "language": "en", "parameters": ["123456"]}


@pytest.fixture(scope="module")
def gateway(database_url: str, simulator: Simulator) -> Iterator[Gateway]:
    spec = provision_file()
    # An administrator who is not a member of the Second inbox: bulk needs membership too.
    spec["accounts"][0]["channels"][1]["members"] = ["outsider@acme.test"]
    with running_gateway(database_url, simulator, spec, allow_private_urls=True) as running:
        yield running


def bulk(gateway: Gateway, body: dict[str, Any], *, token: str = ADMIN_TOKEN, **headers: str) -> Any:
    payload = {"channel_id": gateway.ids["main"], "template": OTP, **body}
    return gateway.http.post(
        gateway.v1("/whatsapp/bulk_messages"), json=payload, headers=gateway.headers(token, **headers)
    )


def batch(gateway: Gateway, batch_id: str, *, token: str = ADMIN_TOKEN) -> Any:
    return gateway.http.get(gateway.v1(f"/whatsapp/bulk_messages/{batch_id}"), headers=gateway.headers(token))


def completed(gateway: Gateway, batch_id: str, timeout: float = 15.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        view: dict[str, Any] = batch(gateway, batch_id).json()
        return view if view["status"] == "completed" and view["counts"]["sent"] == 0 else None

    return wait_for(done, timeout=timeout, what=f"batch {batch_id} completed and delivered")


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def test_one_template_to_many_numbers_each_an_ordinary_message(gateway: Gateway) -> None:
    numbers = [new_number() for _ in range(5)]
    given = [*numbers, "12345", numbers[0], numbers[1].removeprefix("+"), "not a number"]
    response = bulk(gateway, {"phone_numbers": given})
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert {k: v for k, v in accepted.items() if k != "batch_id"} == {
        "status": "processing",
        "total": 7,  # five numbers and two invalid ones; repeats count once
        "accepted": 5,
        "rejected": 2,
    }
    view = completed(gateway, accepted["batch_id"])
    assert view["channel_id"] == gateway.ids["main"] and view["template"]["name"] == "otp_code"
    assert view["counts"] == {"pending": 0, "sent": 0, "delivered": 5, "read": 0, "failed": 0, "rejected": 2}
    assert [r["phone_number"] for r in view["recipients"]] == [*numbers, "12345", "not a number"]
    rejected = [r for r in view["recipients"] if r["status"] == "rejected"]
    assert all(r["message_id"] is None and r["external_error"] == "invalid_phone_number" for r in rejected)
    assert view["completed_at"] >= view["created_at"] and view["expires_at"] > view["completed_at"]
    for recipient in view["recipients"][:5]:
        message = gateway.message(recipient["message_id"])
        assert message["batch_id"] == accepted["batch_id"] and message["status"] == "delivered"
        assert message["cost"] == {"amount": "0.036", "currency": "AZN", "category": "AUTHENTICATION"}
        assert message["conversation"]["status"] == "resolved"
    for number in numbers:  # each exactly once, a repeat included
        assert len(gateway.sim.messages(to=number.removeprefix("+"))) == 1


def test_recipients_carry_their_own_parameters(gateway: Gateway) -> None:
    first, second = new_number(), new_number()
    recipients = [
        {"phone_number": first, "parameters": ["111111"]},
        {"phone_number": second, "parameters": ["222222"]},
    ]
    response = bulk(gateway, {"recipients": recipients})
    assert response.status_code == 202, response.text
    completed(gateway, response.json()["batch_id"])
    for number, code in ((first, "111111"), (second, "222222")):
        [sent] = gateway.sim.messages(to=number.removeprefix("+"))
        assert code in str(sent["body"]["template"]["components"])


def test_bulk_is_for_administrators_who_are_members_of_the_inbox(gateway: Gateway) -> None:
    body = {"phone_numbers": [new_number()]}
    agent = error_of(bulk(gateway, body, token=AGENT_TOKEN), 403)
    assert agent["code"] == "administrator_required"
    outsider = error_of(bulk(gateway, body, token=OUTSIDER_TOKEN), 403)  # an agent, too
    assert outsider["code"] == "administrator_required"
    not_member = error_of(bulk(gateway, {**body, "channel_id": gateway.ids["second"]}), 403)
    assert not_member["code"] == "forbidden"
    other_account = gateway.http.post(
        gateway.v1("/whatsapp/bulk_messages"),
        json={"channel_id": gateway.ids["main"], "template": OTP, **body},
        headers=gateway.headers(OTHER_TOKEN),
    )
    assert error_of(other_account, 403)["code"] == "forbidden"

    created = bulk(gateway, body).json()
    assert (
        error_of(batch(gateway, created["batch_id"], token=AGENT_TOKEN), 403)["code"]
        == "administrator_required"
    )
    globex = gateway.http.get(
        gateway.v1(f"/whatsapp/bulk_messages/{created['batch_id']}", gateway.ids["globex"]),
        headers=gateway.headers(OTHER_TOKEN),
    )
    assert error_of(globex, 404)["code"] == "batch_not_found"
    assert error_of(batch(gateway, "bat_unknown"), 404)["code"] == "batch_not_found"


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"phone_numbers": []}, "invalid_request", "phone_numbers"),
        ({}, "invalid_request", "body"),
        (
            {"phone_numbers": ["+994551234567"], "recipients": [{"phone_number": "+994551234568"}]},
            "invalid_request",
            "body",
        ),
        (
            {"phone_numbers": ["+994551234567"], "template": {"name": "nope", "language": "en"}},
            "template_not_found",
            "template",
        ),
        (
            {"phone_numbers": ["+994551234567"], "template": {"name": "new_feature", "language": "en"}},
            "template_not_approved",
            "template",
        ),
        (
            {"phone_numbers": ["+994551234567"], "template": {"name": "otp_code", "language": "en"}},
            "template_parameters_mismatch",
            "template.parameters",
        ),
        (
            {
                "recipients": [
                    {"phone_number": "+994551234567", "parameters": ["1"]},
                    {"phone_number": "+994551234568", "parameters": []},
                ]
            },
            "template_parameters_mismatch",
            "recipients[1].parameters",
        ),
        (
            {"phone_numbers": ["+994551234567"], "status_callback": {"url": "ftp://x.example"}},
            "invalid_request",
            "status_callback.url",
        ),
    ],
)
def test_bad_requests_store_nothing(gateway: Gateway, body: dict[str, Any], code: str, field: str) -> None:
    error = error_of(bulk(gateway, body), 422)
    assert error["code"] == code
    assert any(d["field"].startswith(field) for d in error["details"]), error
    assert gateway.sim.messages(to="994551234567") == []


def test_more_than_1000_recipients_is_too_many(gateway: Gateway) -> None:
    numbers = [f"+99455{n:07d}" for n in range(2_000_000, 2_001_001)]
    error = error_of(bulk(gateway, {"phone_numbers": numbers}), 422)
    assert error["code"] == "too_many_recipients"
    assert gateway.sim.messages(to=numbers[0].removeprefix("+")) == []


def test_an_idempotency_key_replays_the_first_answer_and_sends_once(gateway: Gateway) -> None:
    number = new_number()
    first = bulk(gateway, {"phone_numbers": [number]}, **{"Idempotency-Key": f"bulk-{number}"})
    again = bulk(gateway, {"phone_numbers": [number]}, **{"Idempotency-Key": f"bulk-{number}"})
    assert first.status_code == again.status_code == 202 and first.json() == again.json()
    other = bulk(gateway, {"phone_numbers": [new_number()]}, **{"Idempotency-Key": f"bulk-{number}"})
    assert error_of(other, 422)["code"] == "idempotency_key_reused"
    completed(gateway, first.json()["batch_id"])
    assert len(gateway.sim.messages(to=number.removeprefix("+"))) == 1


def test_failures_are_counted_with_their_errors(gateway: Gateway) -> None:
    ok = new_number()
    response = bulk(gateway, {"phone_numbers": [ok, "+994500001026"]})  # undeliverable (131026)
    view = wait_for(
        lambda: (v := batch(gateway, response.json()["batch_id"]).json())["counts"]["failed"] == 1 and v,
        what="the failure to be counted",
    )
    [failed] = [r for r in view["recipients"] if r["status"] == "failed"]
    assert failed["phone_number"] == "+994500001026" and failed["external_error"].startswith("131026")


def test_a_batch_is_gone_after_7_days(gateway: Gateway) -> None:
    created = bulk(gateway, {"phone_numbers": [new_number()]}).json()
    completed(gateway, created["batch_id"])

    async def age_and_purge() -> int:
        db = Database(gateway.database_url, pool_size=1)
        try:

            def expire(session: Any) -> None:
                found = session.get(Batch, created["batch_id"])
                found.expires_at = utcnow() - timedelta(seconds=1)

            await db.write(expire)
            assert error_of(batch(gateway, created["batch_id"]), 404)["code"] == "batch_not_found"
            await db.write(purge_expired_batches)
            async with db.read() as session:
                left = await session.scalar(
                    select(func.count())
                    .select_from(BatchRecipient)
                    .where(BatchRecipient.batch_id == created["batch_id"])
                )
                return int(left or 0) + int(await session.get(Batch, created["batch_id"]) is not None)
        finally:
            await db.dispose()

    assert asyncio.run(age_and_purge()) == 0


def test_batch_completed_and_status_callbacks_reach_subscribers(gateway: Gateway, receiver: Receiver) -> None:
    hook = gateway.http.post(
        gateway.v1("/webhooks"),
        json={"url": receiver.url("batches"), "events": ["batch_completed"]},
        headers=gateway.headers(),
    ).json()
    try:
        numbers = [new_number(), new_number()]
        callback = {"url": receiver.url("per-message"), "secret": "bulk secret"}
        created = bulk(gateway, {"phone_numbers": [*numbers, "123"], "status_callback": callback}).json()
        completed(gateway, created["batch_id"])

        def event() -> dict[str, Any] | None:
            found = [
                r for r in receiver.received("batches") if r.json["batch"]["batch_id"] == created["batch_id"]
            ]
            return Webhook(hook["secret"]).verify(found[0].body, found[0].headers) if found else None

        body = wait_for(event, what="batch_completed")
        assert body["event"] == "batch_completed" and body["account_id"] == gateway.ids["acme"]
        summary = body["batch"]
        assert (summary["total"], summary["accepted"], summary["rejected"]) == (3, 2, 1)
        assert summary["cost"] == {"amount": "0.072", "currency": "AZN"}
        assert summary["completed_at"] and summary["counts"]["rejected"] == 1

        # Each message of the batch reports to the batch's status_callback.
        def two_reports() -> list[Any] | None:
            got = receiver.received("per-message")
            return got if len(got) >= 2 else None

        reports = wait_for(two_reports, what="a status report per message")
        signer = Webhook(b"bulk secret")
        phones = {signer.verify(r.body, r.headers)["message"]["phone_number"] for r in reports}
        assert phones == set(numbers)
    finally:
        gateway.http.delete(gateway.v1(f"/webhooks/{hook['id']}"), headers=gateway.headers())
