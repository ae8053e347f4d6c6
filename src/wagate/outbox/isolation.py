"""One bad row never stalls a lane: a batch write that fails is split until the row that fails is found.

A lane writes what it did in batches (a round of send outcomes, of delivery attempts, of due reports).
If one item of a batch makes the write fail (a value a column refuses, a constraint, a bug met by an odd
payload), retrying the same batch fails again, for ever, and everything queued behind it waits. So a
failed batch is split in halves, each written on its own, down to the single item that fails; that one
is parked (kept as a dead letter with its error, out of its lane) and the rest goes on.

An outage is not an odd row: when the database cannot be reached, splitting would only fail more often,
so the error goes to the caller, which keeps the whole batch for its next try.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from wagate.core.db import Database
from wagate.outbox.errors import describe_error

log = logging.getLogger(__name__)

Item = TypeVar("Item")
Result = TypeVar("Result")


def is_outage(exc: BaseException) -> bool:
    """The database is out of reach (or the connection broke): nothing about the rows themselves."""
    return isinstance(exc, OperationalError | InterfaceError | DisconnectionError | ConnectionError | OSError)


def log_failure(logger: logging.Logger, message: str, exc: BaseException, *args: object) -> None:
    """A lane's step failed and will be tried again: while the database is out of reach that is one
    line a second per lane (a traceback a second says nothing more); anything else with its traceback."""
    if is_outage(exc):
        logger.warning(message + ": the database is out of reach (%s)", *args, describe_error(exc))
    else:
        logger.error(message, *args, exc_info=exc)


async def write_isolating(
    db: Database,
    items: Sequence[Item],
    apply: Callable[[Session, Sequence[Item]], Result],
    park: Callable[[Session, Item, str], None],
    *,
    first: bool = False,
    large: bool = False,
) -> tuple[list[Result], list[Item]]:
    """Write `apply(items)` as one unit of work; if it fails for something in the data, write halves
    apart until each item that fails alone is found and `park`ed (in a unit of its own, with the
    error's description).

    Returns the results of the units that were written, and the items that were neither written nor
    parked (the database went away meanwhile, or parking failed too): the caller keeps those for its
    next try, so nothing is lost and nothing written is written twice. `first` and `large`: as
    `Database.write`'s.
    """
    if not items:
        return [], []
    try:
        return [await db.write(lambda session: apply(session, items), first=first, large=large)], []
    except Exception as exc:
        if is_outage(exc):
            log.warning("a lane's write failed: the database is out of reach (%s)", describe_error(exc))
            return [], list(items)
        error = describe_error(exc)
    if len(items) > 1:
        middle = len(items) // 2
        left = await write_isolating(db, items[:middle], apply, park, first=first, large=large)
        right = await write_isolating(db, items[middle:], apply, park, first=first, large=large)
        return left[0] + right[0], left[1] + right[1]
    item = items[0]
    log.error("a lane could not write one item (%s); it goes to its park step", error)
    try:
        await db.write(lambda session: park(session, item, error), first=first, large=large)
    except Exception as exc:
        log.error("parking the item failed too (%s); it stays with its lane", describe_error(exc))
        return [], [item]
    return [], []
