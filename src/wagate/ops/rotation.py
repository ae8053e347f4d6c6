"""`wagate secrets rotate`: every secret stored encrypted, encrypted again with the first key.

What is encrypted at rest (docs/security.md): a channel's Meta access token
(`channels.access_token_encrypted`), an account webhook's signing secret (`webhooks.secret_encrypted`),
a send's status_callback secret (`messages.status_callback["secret_encrypted"]`) and its copy on each
of the callback's deliveries (`deliveries.secret_encrypted`).

Safe while the gateway runs: rows are read in batches of `batch_size` by id and each batch is written
in one short transaction in which every row is updated only if it still holds what was read (compare
and set), so a row changed meanwhile (a new token from provisioning, a webhook deleted) is never
overwritten with a stale value; it is counted as `changed` and looked at again in the next pass.
Idempotent: a value the first key already decrypts is left alone, so a second run changes nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cryptography.fernet import InvalidToken
from sqlalchemy import Text, cast, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session

from wagate.audit.models import CLI, AuditAction
from wagate.audit.service import record
from wagate.channels.models import Channel
from wagate.core.db import Database
from wagate.core.security import SecretBox
from wagate.events.models import Delivery, Webhook
from wagate.messages.models import Message

PASSES = 3  # rows changed meanwhile are looked at again, this many passes at most


@dataclass(frozen=True)
class EncryptedColumn:
    """Where a secret is kept: a column holding the Fernet token, or a JSON column holding it under `key`."""

    name: str
    id: InstrumentedAttribute[Any]
    value: InstrumentedAttribute[Any]
    account_id: InstrumentedAttribute[Any]
    json_key: str | None = None


COLUMNS = (
    EncryptedColumn("channels", Channel.id, Channel.access_token_encrypted, Channel.account_id),
    EncryptedColumn("webhooks", Webhook.id, Webhook.secret_encrypted, Webhook.account_id),
    EncryptedColumn("deliveries", Delivery.id, Delivery.secret_encrypted, Delivery.account_id),
    EncryptedColumn(
        "messages", Message.id, Message.status_callback, Message.account_id, json_key="secret_encrypted"
    ),
)


@dataclass
class ColumnCounts:
    rotated: int = 0  # encrypted again with the first key
    current: int = 0  # already under the first key: left alone
    changed: int = 0  # changed by the gateway between our read and our write: looked at again
    unreadable: int = 0  # no configured key decrypts it (a key removed too early): left alone

    def as_dict(self) -> dict[str, int]:
        return {
            "rotated": self.rotated,
            "already_current": self.current,
            "changed_meanwhile": self.changed,
            "unreadable": self.unreadable,
        }


@dataclass
class RotationReport:
    keys: int
    columns: dict[str, ColumnCounts] = field(default_factory=dict)
    per_account: dict[int, Counter[str]] = field(default_factory=dict)

    @property
    def left_behind(self) -> int:
        """Rows still not under the first key: unreadable ones, and ones that kept changing."""
        return sum(c.unreadable + c.changed for c in self.columns.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "keys": self.keys,
            "tables": {name: counts.as_dict() for name, counts in self.columns.items()},
            "rotated": sum(c.rotated for c in self.columns.values()),
            "left_behind": self.left_behind,
        }


def _stored(column: EncryptedColumn) -> Any:
    # JSON is compared as the text the database holds (PostgreSQL's `json` has no `=`).
    return cast(column.value, Text) if column.json_key else column.value


def _token_of(column: EncryptedColumn, stored: str) -> tuple[str | None, Any]:
    """The Fernet token in a stored value, and the value parsed (JSON columns)."""
    if column.json_key is None:
        return stored, None
    try:
        parsed = json.loads(stored)
    except ValueError:
        return None, None
    token = parsed.get(column.json_key) if isinstance(parsed, dict) else None
    return (token if isinstance(token, str) else None), parsed


@dataclass(frozen=True)
class _Swap:
    row_id: Any
    account_id: int
    old: str
    new: Any


def _write_swaps(column: EncryptedColumn, swaps: list[_Swap]) -> Callable[[Session], list[bool]]:
    def unit(session: Session) -> list[bool]:
        done = []
        for swap in swaps:
            result = session.execute(
                update(column.value.class_)
                .where(column.id == swap.row_id, _stored(column) == swap.old)
                .values({column.value.key: swap.new})
                .execution_options(synchronize_session=False)
            )
            done.append(bool(result.rowcount))  # type: ignore[attr-defined]
        return done

    return unit


async def _rotate_column(
    db: Database, box: SecretBox, column: EncryptedColumn, report: RotationReport, batch_size: int
) -> ColumnCounts:
    counts = ColumnCounts()
    after: Any = None
    while True:
        query = select(column.id, _stored(column), column.account_id).where(column.value.is_not(None))
        if column.json_key is not None:
            query = query.where(_stored(column).like(f'%"{column.json_key}"%'))
        if after is not None:
            query = query.where(column.id > after)
        async with db.read() as session:
            rows = (await session.execute(query.order_by(column.id).limit(batch_size))).all()
        if not rows:
            return counts
        after = rows[-1][0]
        swaps: list[_Swap] = []
        for row_id, stored, account_id in rows:
            token, parsed = _token_of(column, stored)
            if token is None:
                continue
            if box.is_current(token):
                counts.current += 1
                continue
            try:
                new_token = box.rotate(token)
            except InvalidToken:
                counts.unreadable += 1
                continue
            new: Any = new_token if column.json_key is None else {**parsed, column.json_key: new_token}
            swaps.append(_Swap(row_id, account_id, stored, new))
        if not swaps:
            continue
        done = await db.write(_write_swaps(column, swaps))
        for swap, ok in zip(swaps, done, strict=True):
            if ok:
                counts.rotated += 1
                report.per_account.setdefault(swap.account_id, Counter())[column.name] += 1
            else:
                counts.changed += 1


async def rotate_secrets(db: Database, box: SecretBox, *, batch_size: int = 500) -> RotationReport:
    """Encrypt every stored secret again with the first key; a `secrets.rotated` audit entry for each
    account that had any (with its counts, by `cli`)."""
    report = RotationReport(keys=box.key_count)
    for column in COLUMNS:
        total = ColumnCounts()
        for _ in range(PASSES):
            counts = await _rotate_column(db, box, column, report, batch_size)
            total.rotated += counts.rotated
            total.unreadable = counts.unreadable
            total.current = counts.current
            total.changed = counts.changed
            if not counts.changed:
                break
        total.current -= total.rotated - counts.rotated  # rotated in an earlier pass, current since
        report.columns[column.name] = total
    if report.per_account:

        def unit(session: Session) -> None:
            for account_id, counts in sorted(report.per_account.items()):
                record(
                    session,
                    CLI,
                    account_id=account_id,
                    action=AuditAction.secrets_rotated,
                    target_type="account",
                    target_id=account_id,
                    changes=dict(sorted(counts.items())),
                )

        await db.write(unit)
    return report
