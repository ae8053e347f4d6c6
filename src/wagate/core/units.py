"""Units of work and how a batch of them runs: in one transaction, under one commit (`run_units`),
those of one key merged (`Mergeable`), on the session a writer thread keeps (`WriterSession`). Queued
by wagate.core.group_commit for wagate.core.db's `Database.write` (see that module's docstring)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

log = logging.getLogger(__name__)
T = TypeVar("T")
# PostgreSQL: deadlock_detected and serialization_failure; the transaction did nothing, run it again.
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
RETRY_ATTEMPTS = 3
UnitOfWork = Callable[[Session], T]
# A list in a write session's `info` of what its units leave for after the commit (wagate.core.live's
# `record_live` appends to it). `run_units` takes out a unit's own when it is rolled back, and the
# Database hands the rest of a committed batch to its commit listeners.
COMMIT_NOTES = "wagate.commit_notes"
# A set in a write session's `info` of SQL its units leave to run in their transaction right before
# its commit, all of it in one round trip on the driver (PostgreSQL's simple query protocol): the
# NOTIFY of wagate.outbox.notify, delivered only if the rows commit, one statement for the whole
# batch instead of one per unit. Dropped with a unit rolled back (to its savepoint, or with the batch).
COMMIT_STATEMENTS = "wagate.commit_statements"


def detached(session: Session, instance: T) -> T:
    """`instance` written and taken out of the session, so a unit can return it: the batch expires
    every object still in the session after each unit, and an expired object cannot be read once
    its session is closed."""
    session.flush()
    session.expunge(instance)
    return instance


def _run_alone(session: Session, unit: UnitOfWork[T]) -> T:
    """One unit, as if it had the session to itself: what it changed through the ORM is written
    before the next unit runs (Core statements do not autoflush), and what it loaded is not handed
    stale to the next one."""
    result = unit(session)
    session.flush()
    session.expire_all()
    return result


@dataclass(frozen=True)
class Mergeable(Generic[T]):
    """A unit of work that a batch runs together with the others of its key: `run_many(session,
    items)` stores all their items at once and returns one result for each, in order. Alone (a batch
    of one, or the retry of a batch that failed, a savepoint per unit) it runs with its item only."""

    key: Hashable
    item: Any
    run_many: Callable[[Session, list[Any]], list[T]]

    def __call__(self, session: Session) -> T:
        return self.run_many(session, [self.item])[0]


def _bound(run_many: Callable[[Session, list[Any]], list[T]], items: list[Any]) -> UnitOfWork[list[T]]:
    return lambda session: run_many(session, items)


def _run_merged(session: Session, units: list[UnitOfWork[Any]]) -> list[Any]:
    """Each unit's result; the `Mergeable` ones of one key and kind run as one, where the first of
    them stands in the batch."""
    groups: dict[tuple[Any, Hashable], list[int]] = {}
    for index, unit in enumerate(units):
        if isinstance(unit, Mergeable):
            groups.setdefault((unit.run_many, unit.key), []).append(index)
    results: list[Any] = [None] * len(units)
    for index, unit in enumerate(units):
        if not isinstance(unit, Mergeable):
            results[index] = _run_alone(session, unit)
            continue
        group = groups[(unit.run_many, unit.key)]
        if group[0] != index:
            continue  # ran with the first of its group
        items = [cast(Mergeable[Any], units[member]).item for member in group]
        merged = _run_alone(session, _bound(unit.run_many, items))
        for member, result in zip(group, merged, strict=True):
            results[member] = result
    return results


def _commit(session: Session) -> None:
    """Commit, after what the units left to run in the transaction (`COMMIT_STATEMENTS`)."""
    statements: set[str] | None = session.info.pop(COMMIT_STATEMENTS, None)
    if statements:
        # Straight to the driver: such statements return nothing, and the simple query protocol takes
        # several in one round trip. Sorted: the same batch always says the same.
        driver = session.connection().connection.driver_connection
        driver.execute("; ".join(sorted(statements)))  # type: ignore[union-attr]
    session.commit()


def run_units(session: Session, units: list[UnitOfWork[Any]]) -> list[tuple[bool, Any]]:
    """Run a batch of units in the session's transaction and commit once.

    Optimistic: units rarely fail (every check ran before), so they first run without savepoints,
    which cost a statement each, and the `Mergeable` ones merged. If one raises, the batch is rolled
    back and run again with each unit alone in its own savepoint, so only the failing one is lost.
    """
    try:
        results: list[tuple[bool, Any]] = [(True, result) for result in _run_merged(session, units)]
        _commit(session)
        return results
    except Exception:
        session.rollback()
        session.info.pop(COMMIT_NOTES, None)
        session.info.pop(COMMIT_STATEMENTS, None)
        if len(units) == 1:
            raise
    results = []
    for unit in units:
        notes: list[Any] | None = session.info.get(COMMIT_NOTES)
        kept = len(notes) if notes else 0
        statements: set[str] | None = session.info.get(COMMIT_STATEMENTS)
        noted = set(statements) if statements else set()
        try:
            with session.begin_nested():
                results.append((True, _run_alone(session, unit)))
        except Exception as exc:  # the unit's own failure: only its savepoint rolls back
            results.append((False, exc))
            if notes := session.info.get(COMMIT_NOTES):
                del notes[kept:]
            if statements := session.info.get(COMMIT_STATEMENTS):
                statements &= noted
    _commit(session)
    return results


class WriterSession:
    """The session of one writer thread, kept from batch to batch on one connection.

    A batch of one unit (a single send at a low rate, the dispatcher's result of one call) used to
    open a Session, check a connection out of the pool, and give both back: a tenth of the writer's
    CPU for such a batch (docs/performance.md, "A message alone"). Kept, the session only begins and
    commits. It holds no objects between batches (`expunge_all`), and a batch whose
    connection broke (or whose rollback failed) leaves it for a new one at the next batch. Only its
    thread may use it.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session: Session | None = None

    def _open(self) -> Session:
        if self._session is None:
            self._session = Session(self.engine.connect(), expire_on_commit=False)
        return self._session

    def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            connection = session.bind
            try:
                session.close()
            finally:
                if isinstance(connection, Connection):
                    connection.close()

    def _after_failure(self, session: Session, exc: BaseException) -> None:
        """Keep the session for the next batch only when its connection is sound and not in a
        transaction (run_units rolled back what failed)."""
        broken = isinstance(exc, DBAPIError) and exc.connection_invalidated
        if not broken:
            try:
                session.rollback()
                session.info.clear()
                session.expunge_all()
                return
            except Exception:
                log.debug("the writer's session could not roll back; a new one follows", exc_info=True)
        self.close()

    def run(self, units: list[UnitOfWork[Any]], notes: list[Any] | None = None) -> list[tuple[bool, Any]]:
        """`run_units`, again when PostgreSQL rolled it all back to break a deadlock (with the large
        units' connection) or a serialization conflict: nothing was stored. `notes`: receives the
        committed units' notes (`COMMIT_NOTES`)."""
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            session = self._open()
            try:
                results = run_units(session, units)
            except DBAPIError as exc:
                self._after_failure(session, exc)
                if (
                    attempt == RETRY_ATTEMPTS
                    or getattr(exc.orig, "sqlstate", None) not in RETRYABLE_SQLSTATES
                ):
                    raise
                log.warning("a write was rolled back by the server (%s); running it again", exc.orig)
                continue
            except BaseException as exc:
                self._after_failure(session, exc)
                raise
            committed = session.info.pop(COMMIT_NOTES, None)
            if notes is not None and committed:
                notes += committed
            session.expunge_all()
            return results
        raise AssertionError("unreachable")
