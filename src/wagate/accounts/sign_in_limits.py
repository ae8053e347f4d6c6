"""How many sign-in attempts are allowed, counted in the database before a password is checked
(API.md section 12, "Under attack").

Every attempt adds one to three counters, each a fixed window of `WINDOW` that starts at its first
attempt, in `sign_in_counters`, shared by every process of the deployment:

- the email and the client address together: after `PAIR_LIMIT` attempts, 429 until the window ends.
  This is what stops one attacker guessing one person's password (API.md: 5 in 15 minutes);
- the client address alone: `CLIENT_LIMIT` attempts (an office shares one address), then 429;
- the email alone, from every address: `EMAIL_LIMIT` attempts, then 429, except from an address that
  signed in to this email within `KNOWN_FOR`. Spreading guesses over many addresses gains an attacker
  `EMAIL_LIMIT` tries per window, and never keeps the owner out of the place they usually sign in from.

The attempt is counted by one atomic upsert that returns the new count, before argon2 runs, so
attempts that arrive together are held to the same limit as attempts one after another. A successful
sign-in takes its attempt back (the pair's count is cleared, the email's and the address's lose one)
and remembers the address for the email. Keys are SHA-256 digests: the table holds no email or address.
"""

from __future__ import annotations

import enum
import hashlib
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, case, delete, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from wagate.accounts.models import SignInCounter
from wagate.core.db import dialect_name
from wagate.core.tables import UTCDateTime, table_of

WINDOW = timedelta(minutes=15)
PAIR_LIMIT = 5
CLIENT_LIMIT = 50
EMAIL_LIMIT = 20
KNOWN_FOR = timedelta(days=30)


class CounterKind(enum.StrEnum):
    pair = "pair"
    client = "client"
    email = "email"
    # Not a counter: an address this email signed in from, at `window_started_at`.
    known = "known"


def _key(kind: CounterKind, *parts: str) -> str:
    return hashlib.sha256("\x00".join((kind, *parts)).encode()).hexdigest()


@dataclass(frozen=True)
class AttemptKeys:
    """The counters one attempt touches."""

    pair: str
    client: str
    email: str
    known: str

    @classmethod
    def of(cls, email: str, client: str) -> AttemptKeys:
        return cls(
            pair=_key(CounterKind.pair, email, client),
            client=_key(CounterKind.client, client),
            email=_key(CounterKind.email, email),
            known=_key(CounterKind.known, email, client),
        )


def count_attempt(session: Session, keys: AttemptKeys, now: datetime) -> int:
    """Count one attempt on every counter; the seconds to wait when a limit is passed, else 0."""
    counters = table_of(SignInCounter)
    insert = postgresql.insert if dialect_name(session) == "postgresql" else sqlite.insert
    rows = [
        {"key_hash": keys.pair, "kind": CounterKind.pair, "window_started_at": now, "attempts": 1},
        {"key_hash": keys.client, "kind": CounterKind.client, "window_started_at": now, "attempts": 1},
        {"key_hash": keys.email, "kind": CounterKind.email, "window_started_at": now, "attempts": 1},
    ]
    statement = insert(counters).values(rows)
    window_over = counters.c.window_started_at <= now - WINDOW
    counted = session.execute(
        statement.on_conflict_do_update(
            index_elements=[counters.c.key_hash],
            set_={
                "attempts": case((window_over, 1), else_=counters.c.attempts + 1),
                "window_started_at": case(
                    (window_over, literal(now, UTCDateTime)), else_=counters.c.window_started_at
                ),
            },
        ).returning(counters.c.key_hash, counters.c.attempts, counters.c.window_started_at)
    ).all()
    limits = {keys.pair: PAIR_LIMIT, keys.client: CLIENT_LIMIT, keys.email: EMAIL_LIMIT}
    over: dict[str, datetime] = {key: started for key, attempts, started in counted if attempts > limits[key]}
    if keys.email in over and _is_known(session, keys, now):
        del over[keys.email]  # the owner's usual address: the email's own limit is the soft one
    if not over:
        return 0
    return max(1, math.ceil(max((started + WINDOW - now).total_seconds() for started in over.values())))


def _is_known(session: Session, keys: AttemptKeys, now: datetime) -> bool:
    known_since = session.scalar(
        select(SignInCounter.window_started_at).where(SignInCounter.key_hash == keys.known)
    )
    return known_since is not None and known_since > now - KNOWN_FOR


def take_back_attempt(session: Session, keys: AttemptKeys, now: datetime) -> None:
    """A successful sign-in: its attempt was no guess. The pair starts afresh, the email and the
    address lose this one attempt (one good password must not wipe out a stranger's failures), and the
    address is remembered as one this email signs in from."""
    session.execute(delete(SignInCounter).where(SignInCounter.key_hash == keys.pair))
    session.execute(
        update(SignInCounter)
        .where(SignInCounter.key_hash.in_([keys.client, keys.email]), SignInCounter.attempts > 0)
        .values(attempts=SignInCounter.attempts - 1)
    )
    counters = table_of(SignInCounter)
    insert = postgresql.insert if dialect_name(session) == "postgresql" else sqlite.insert
    statement = insert(counters).values(
        key_hash=keys.known, kind=CounterKind.known, window_started_at=now, attempts=0
    )
    session.execute(
        statement.on_conflict_do_update(index_elements=[counters.c.key_hash], set_={"window_started_at": now})
    )


def uncount_attempt(session: Session, keys: AttemptKeys) -> None:
    """An attempt refused before its password was checked for a cause not its own (the checks' queue
    was full): it counts against no limit."""
    session.execute(
        update(SignInCounter)
        .where(SignInCounter.key_hash.in_([keys.pair, keys.client, keys.email]), SignInCounter.attempts > 0)
        .values(attempts=SignInCounter.attempts - 1)
    )


PURGE_SLICE = 10_000


def purge_stale_counters(session: Session, now: datetime) -> int:
    """Up to `PURGE_SLICE` counters whose window is over, or addresses not seen for `KNOWN_FOR` (the
    hourly purge calls it until it returns 0; a flood of made-up emails can leave many)."""
    stale = (
        select(SignInCounter.key_hash)
        .where(
            or_(
                and_(
                    SignInCounter.kind != CounterKind.known, SignInCounter.window_started_at <= now - WINDOW
                ),
                and_(
                    SignInCounter.kind == CounterKind.known,
                    SignInCounter.window_started_at <= now - KNOWN_FOR,
                ),
            )
        )
        .limit(PURGE_SLICE)
    )
    result = session.execute(delete(SignInCounter).where(SignInCounter.key_hash.in_(stale)))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
