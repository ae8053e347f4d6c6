"""Several statuses in one POST, as Meta batches them, with each message's statuses still in order."""

from __future__ import annotations

from typing import Any

from sim_harness import PHONE_NUMBER_ID, WABA_ID, Harness
from sim_helpers import send, user_id_of, wamid_of

NUMBERS = [f"99450{n:07d}" for n in range(1234560, 1234566)]
OTHER_CHANNEL = "106540352242999"


def slow_statuses(harness: Harness, window: float) -> None:
    # Statuses come due a while after the sends, so sends made one after another come due together.
    harness.control(
        "POST",
        "/_sim/config",
        json={
            "status_delays": {"sent": 0.4, "delivered": 0.8, "read": 1.2},
            "read_enabled": True,
            "webhook_batch_window_seconds": window,
        },
    )


def status_lists(harness: Harness) -> list[list[dict[str, Any]]]:
    """The statuses of each change of each POST, in arrival order."""
    return [
        change["value"]["statuses"]
        for body in harness.receiver.snapshot()
        for entry in body["entry"]
        for change in entry["changes"]
    ]


def test_statuses_due_together_share_one_post_in_order(harness: Harness) -> None:
    slow_statuses(harness, window=0.3)
    wamids = {wamid_of(send(harness, to=number)): number for number in NUMBERS}
    harness.receiver.wait_for(lambda r: all(len(r.statuses(w)) == 3 for w in wamids), timeout=10)
    bodies = harness.receiver.snapshot()
    assert len(bodies) < 3 * len(NUMBERS)
    assert max(len(statuses) for statuses in status_lists(harness)) > 1
    for wamid in wamids:
        assert [s["status"] for s in harness.receiver.statuses(wamid)] == ["sent", "delivered", "read"]
    for body in bodies:
        [entry] = body["entry"]
        assert entry["id"] == WABA_ID
        [change] = entry["changes"]
        value = change["value"]
        # One contact per recipient, in the order of the statuses, so contacts[i] goes with statuses[i].
        recipients = [wamids[s["id"]] for s in value["statuses"]]
        assert [c["wa_id"] for c in value["contacts"]] == recipients
        assert [c["user_id"] for c in value["contacts"]] == [user_id_of(harness, n) for n in recipients]
    assert harness.receiver.bad_signatures == 0


def test_a_window_of_zero_sends_one_status_per_post(harness: Harness) -> None:
    slow_statuses(harness, window=0)
    wamids = [wamid_of(send(harness, to=number)) for number in NUMBERS[:3]]
    harness.receiver.wait_for(lambda r: all(len(r.statuses(w)) == 3 for w in wamids))
    assert [len(statuses) for statuses in status_lists(harness)] == [1] * 9


def test_channels_of_one_waba_share_a_post_as_separate_changes(harness: Harness) -> None:
    harness.control(
        "POST",
        "/_sim/channels",
        json={"phone_number_id": OTHER_CHANNEL, "waba_id": WABA_ID, "display_phone_number": "15550002222"},
    )
    slow_statuses(harness, window=0.3)
    first = wamid_of(send(harness, to=NUMBERS[0]))
    second = harness.send(
        {"messaging_product": "whatsapp", "to": NUMBERS[1], "type": "text", "text": {"body": "hi"}},
        phone_number_id=OTHER_CHANNEL,
    )
    other = wamid_of(second)
    harness.receiver.wait_for(lambda r: len(r.statuses(first)) == 3 and len(r.statuses(other)) == 3)
    shared = [body for body in harness.receiver.snapshot() if len(body["entry"][0]["changes"]) == 2]
    assert shared, harness.receiver.snapshot()
    for body in shared:
        [entry] = body["entry"]
        channels = [c["value"]["metadata"]["phone_number_id"] for c in entry["changes"]]
        assert sorted(channels) == sorted([PHONE_NUMBER_ID, OTHER_CHANNEL])
        for change in entry["changes"]:
            value = change["value"]
            expected = first if value["metadata"]["phone_number_id"] == PHONE_NUMBER_ID else other
            assert {s["id"] for s in value["statuses"]} == {expected}


def test_a_batch_is_retried_whole_and_order_holds(harness: Harness) -> None:
    slow_statuses(harness, window=0.3)
    harness.receiver.reply_status = 503
    wamids = [wamid_of(send(harness, to=number)) for number in NUMBERS[:4]]
    harness.receiver.wait_for(
        lambda _: harness.control("GET", "/_sim/stats")["webhooks"]["failed_attempts"] >= 2,
        what="failed attempts",
    )
    assert harness.receiver.snapshot() == []
    harness.receiver.reply_status = 200
    harness.receiver.wait_for(lambda r: all(len(r.statuses(w)) == 3 for w in wamids), timeout=10)
    for wamid in wamids:
        assert [s["status"] for s in harness.receiver.statuses(wamid)] == ["sent", "delivered", "read"]
    # The first POST that got through was the batch of sent statuses that had waited, kept whole.
    first = status_lists(harness)[0]
    assert len(first) > 1 and {s["status"] for s in first} == {"sent"}
