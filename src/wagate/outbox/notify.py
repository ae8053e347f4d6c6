"""Cross-process wake-ups on PostgreSQL: NOTIFY in the transaction that adds outbox rows, LISTEN in workers.

Within one process the API wakes the dispatcher directly; this is for `wagate serve --no-dispatcher`
API processes and separate `wagate worker`s, which would otherwise find new rows only by polling.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

import psycopg
from sqlalchemy.orm import Session

from wagate.core.db import dialect_name
from wagate.core.units import COMMIT_STATEMENTS

log = logging.getLogger(__name__)
CHANNEL = "wagate_outbox"
WEBHOOK_MARK = ":webhook"


def notify_outbox(session: Session, channel_id: int | None, *, webhook: bool = False) -> None:
    """Tell listening workers that outbox rows (for this channel, if given) are due; sent on commit.
    `webhook`: the rows are Meta's webhook bodies, not sends.

    The payload names this process, whose own dispatcher was already woken without the round trip.
    Only noted here, as a statement for the end of the transaction (wagate.core.units'
    `COMMIT_STATEMENTS`): the notifications of every unit of a batch go out in one round trip just
    before its commit, and PostgreSQL delivers them only if the rows commit, instead of a round trip
    per unit (0.3 ms of CPU each through the ORM, a tenth of an accepted send's whole cost on
    PostgreSQL). A unit rolled back takes its notifications with it.
    """
    if dialect_name(session) == "postgresql":
        # Only digits, a colon and WEBHOOK_MARK: safe to write into the statement as a literal.
        payload = f"{os.getpid()}:{channel_id or ''}{WEBHOOK_MARK if webhook else ''}"
        statements: set[str] | None = session.info.get(COMMIT_STATEMENTS)
        if statements is None:
            statements = session.info[COMMIT_STATEMENTS] = set()
        statements.add(f"NOTIFY {CHANNEL}, '{payload}'")


def libpq_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


async def listen_outbox(url: str, wake: Callable[[int | None, bool], None]) -> None:
    """Call `wake(channel_id, webhook)` for every notification until cancelled (see `notify_outbox`);
    reconnects after a lost connection."""
    own_pid = str(os.getpid())
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                wake(None, True)  # rows may have arrived while we were not listening
                async for note in conn.notifies():
                    sender, _, channel = note.payload.partition(":")
                    if sender != own_pid:
                        webhook = channel.endswith(WEBHOOK_MARK)
                        channel = channel.removesuffix(WEBHOOK_MARK)
                        wake(int(channel) if channel.isdigit() else None, webhook)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("outbox LISTEN connection lost (%r); reconnecting", exc)
            await asyncio.sleep(1.0)
