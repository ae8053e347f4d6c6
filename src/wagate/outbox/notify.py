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
from sqlalchemy import text
from sqlalchemy.orm import Session

from wagate.db import dialect_name

log = logging.getLogger(__name__)
CHANNEL = "wagate_outbox"
WEBHOOK_MARK = ":webhook"


def notify_outbox(session: Session, channel_id: int | None, *, webhook: bool = False) -> None:
    """Tell listening workers that outbox rows (for this channel, if given) are due; sent on commit.
    `webhook`: the rows are Meta's webhook bodies, not sends.

    The payload names this process, whose own dispatcher was already woken without the round trip.
    """
    if dialect_name(session) == "postgresql":
        payload = f"{os.getpid()}:{channel_id or ''}{WEBHOOK_MARK if webhook else ''}"
        session.execute(text("SELECT pg_notify(:c, :p)"), {"c": CHANNEL, "p": payload})


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
