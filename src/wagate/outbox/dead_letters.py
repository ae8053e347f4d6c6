"""Dead letters: work a lane could not apply after its attempts, kept for an operator to read.

A row that fails every time (a stored Meta webhook body no database takes, a result that breaks a
constraint) must not be retried forever, nor hold up the rows behind it, nor be dropped unseen: it is
moved here with its error, in the transaction that takes it out of its lane, and `wagate dead-letters`
shows it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Integer, String, Text, insert, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, Session, mapped_column

from wagate.core.db import Database, isoformat, utcnow
from wagate.core.tables import Base, BigIntId, UTCDateTime

ERROR_LENGTH = 1000


class DeadLetter(Base):
    __tablename__ = "dead_letters"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    # What it was: "meta_webhook" (a stored body of Meta's), "send_outcome", "event_attempt".
    kind: Mapped[str] = mapped_column(String(32))
    # Where it came from, to find it in the logs: an outbox job id, a message id.
    reference: Mapped[str | None] = mapped_column(String(80), nullable=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    error: Mapped[str] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


def bury(
    session: Session,
    *,
    kind: str,
    payload: dict[str, Any],
    error: str,
    attempts: int = 1,
    reference: str | None = None,
) -> None:
    """Keep what could not be applied; the caller takes it out of its lane in the same transaction."""
    session.execute(
        insert(DeadLetter).values(
            kind=kind,
            reference=reference,
            payload=payload,
            error=error[:ERROR_LENGTH],
            attempts=attempts,
            created_at=utcnow(),
        )
    )


def dead_letter_view(letter: DeadLetter) -> dict[str, Any]:
    return {
        "id": letter.id,
        "kind": letter.kind,
        "reference": letter.reference,
        "attempts": letter.attempts,
        "error": letter.error,
        "created_at": isoformat(letter.created_at),
        "payload": letter.payload,
    }


async def list_dead_letters(
    session: AsyncSession, *, limit: int = 50, before: int | None = None
) -> list[dict[str, Any]]:
    """Newest first; the next page is the one `before` the last id of this one."""
    query = select(DeadLetter).order_by(DeadLetter.id.desc()).limit(limit)
    if before is not None:
        query = query.where(DeadLetter.id < before)
    return [dead_letter_view(letter) for letter in await session.scalars(query)]


async def read_dead_letters(database_url: str, *, limit: int, before: int | None) -> list[dict[str, Any]]:
    """`wagate dead-letters`: one page, from a process of its own."""
    db = Database(database_url, pool_size=1)
    try:
        async with db.read() as session:
            return await list_dead_letters(session, limit=limit, before=before)
    finally:
        await db.dispose()
