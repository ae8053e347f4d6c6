"""PostgreSQL's hand-over of a received status body (docs/architecture.md, "Meta webhooks"), when it
goes wrong: the body is stored before its 200 and handed to the dispatcher in memory, and the row stays
in the outbox, due `HANDED_OVER_SECONDS` on, until the transaction that applies the body deletes it.
So an apply that fails, or a process killed with the body in memory, loses nothing: the row is claimed
once due and applied then, once.

Each test holds the messages table from another session, so the apply waits inside its transaction
(after it deleted the row), and then cuts that transaction off: its connection terminated, or its whole
process killed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from test_receiver import post_signed, sent_message, status, status_webhook

import support.gateway_process as machinery
from support.app_in_thread import sql
from support.gateway_process import GatewayProcess, Provisioned
from support.harness import Gateway, Simulator, wait_for
from wagate.whatsapp.receiver import HANDED_OVER_SECONDS

# It holds a row lock and waits for the apply to queue behind it within seconds, which a loaded
# machine stretches: alone.
pytestmark = [pytest.mark.timeout(120), pytest.mark.alone]

# Fixtures, found by pytest as this module's attributes.
provisioned = machinery.provisioned
gateway_process = machinery.gateway_process
wired_simulator = machinery.wired_simulator


@pytest.fixture
def running(database_url: str, request: pytest.FixtureRequest, simulator: Simulator) -> Iterator[Gateway]:
    """`wagate serve` in a process of its own, the only one on its database (so it sends for the channel
    and applies its statuses), with the simulator's statuses off: the test posts them."""
    if database_url.startswith("sqlite"):
        pytest.skip("the hand-over is PostgreSQL's: SQLite applies a status before its 200")
    provisioned: Provisioned = request.getfixturevalue("provisioned")
    gateway_process: GatewayProcess = request.getfixturevalue("gateway_process")
    request.getfixturevalue("wired_simulator")(gateway_process.url)
    gateway_process.start()
    ids = {"acme": provisioned.account_id, "main": provisioned.channel_id}
    simulator.configure(auto_statuses=False)
    try:
        with httpx.Client(timeout=10) as http:
            yield Gateway(gateway_process.url, http, simulator, provisioned.database_url, ids)
    finally:
        simulator.configure(auto_statuses=True)


STORED_BODIES = "SELECT attempts, locked_by FROM outbox WHERE kind = 'meta_webhook'"


def plain_url(database_url: str) -> str:
    return database_url.replace("postgresql+psycopg://", "postgresql://")


@contextlib.contextmanager
def messages_held(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """Another session holds the messages table: reads go on, a status's update waits."""
    with psycopg.connect(plain_url(database_url)) as held:
        held.execute("LOCK TABLE messages IN EXCLUSIVE MODE")
        try:
            yield held
        finally:
            held.rollback()


def waiting_apply(database_url: str, held: psycopg.Connection[Any]) -> int:
    """The backend of the transaction applying the status, once it waits on the held table."""
    sql = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND pid <> %s"
    )
    # Autocommit: PostgreSQL takes one snapshot of pg_stat_activity per transaction, so polls in one
    # transaction would all see the first (taken before the apply came to wait, on a loaded machine).
    with psycopg.connect(plain_url(database_url), autocommit=True) as look:

        def waiters() -> list[int] | None:
            pids = [row[0] for row in look.execute(sql, (held.info.backend_pid,)).fetchall()]
            return pids or None

        # Handed over, the body is applied at once; a body the dispatcher had no room for, or whose
        # channel it was still taking, is stored due HANDED_OVER_SECONDS on and claimed then (seen
        # once under a loaded CI machine): either way its apply comes to wait here.
        pids = wait_for(
            waiters, timeout=HANDED_OVER_SECONDS + 15, what="the status's apply to wait on the messages"
        )
    assert len(pids) == 1, f"one transaction waits on the messages, not {pids}"
    return pids[0]


def stored_bodies(database_url: str) -> list[tuple[Any, ...]]:
    return machinery.query(database_url, STORED_BODIES)


def history_of(database_url: str, message_id: str) -> list[str]:
    rows = sql(database_url, "SELECT status_history FROM messages WHERE id = :id", id=message_id)
    return [entry["status"] for entry in rows[0][0]]


def test_a_status_whose_apply_fails_is_claimed_once_due_and_applied_once(running: Gateway) -> None:
    """The transaction applying a handed-over body loses its connection: nothing of it is stored, the
    row is still there, unclaimed, and once due the dispatcher claims it and applies the status."""
    message_id, wamid, to = sent_message(running)
    delivered = status_webhook(status(wamid, "delivered", int(time.time()), to))
    with messages_held(running.database_url) as held:
        assert post_signed(running, delivered).status_code == 200
        apply_pid = waiting_apply(running.database_url, held)
        held.execute("SELECT pg_terminate_backend(%s)", (apply_pid,))
        # Its delete of the row went with it: the row waits for its claim, which has not come.
        assert wait_for(lambda: stored_bodies(running.database_url) == [(0, None)], timeout=5)
    assert running.message(message_id)["status"] == "sent"
    running.wait_status(message_id, "delivered", timeout=HANDED_OVER_SECONDS + 10)
    assert stored_bodies(running.database_url) == []
    assert history_of(running.database_url, message_id).count("delivered") == 1


def test_a_status_handed_over_to_a_process_killed_before_applying_it_is_applied_after_the_restart(
    running: Gateway, gateway_process: GatewayProcess
) -> None:
    """SIGKILL while the body waits in the dispatcher's memory (its apply held by another session):
    the 200 went to Meta, which will not send the body again, and the row is all that is left of it.
    The restarted process claims it once due and applies it."""
    message_id, wamid, to = sent_message(running)
    delivered = status_webhook(status(wamid, "delivered", int(time.time()), to))
    with messages_held(running.database_url) as held:
        assert post_signed(running, delivered).status_code == 200
        waiting_apply(running.database_url, held)
        gateway_process.kill()
    # The killed process's transaction ends with its connection, its delete undone.
    assert wait_for(lambda: stored_bodies(running.database_url) == [(0, None)], timeout=10)
    gateway_process.start()
    running.wait_status(message_id, "delivered", timeout=HANDED_OVER_SECONDS + 10)
    assert stored_bodies(running.database_url) == []
    assert history_of(running.database_url, message_id).count("delivered") == 1
