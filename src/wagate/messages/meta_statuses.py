"""Applying Meta's message statuses (forward only, idempotent), and the statuses parked because they
came before their message's wamid was known."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sqlalchemy import Select, Update, any_, bindparam, delete, or_, select
from sqlalchemy.orm import Session

from wagate.conversations.customers import phone_of_wa_id
from wagate.conversations.models import USER_ID_LENGTH
from wagate.core.db import dialect_name, utcnow
from wagate.core.tables import rows_from_json, table_of
from wagate.messages.models import (
    MESSAGE_COLUMNS,
    Direction,
    Message,
    MessageRecord,
    MessageStatus,
    ParkedStatus,
)
from wagate.messages.pricing import Prices, settle_cost
from wagate.messages.status import StatusChange, apply_status
from wagate.whatsapp.payloads import StatusKind, StatusUpdate

_STATUS = {
    StatusKind.SENT: MessageStatus.sent,
    StatusKind.DELIVERED: MessageStatus.delivered,
    StatusKind.READ: MessageStatus.read,
    StatusKind.FAILED: MessageStatus.failed,
}
_ORDER = {MessageStatus.sent: 0, MessageStatus.delivered: 1, MessageStatus.read: 2, MessageStatus.failed: 3}


def _external_error(update: StatusUpdate) -> str | None:
    if not update.errors:
        return None
    error = update.errors[0]
    return f"{error.code}: {error.title or error.message or 'unknown error'}"


def _match(
    update: StatusUpdate,
    channel_id: int | None,
    by_wamid: dict[str, MessageRecord],
    by_id: dict[str, MessageRecord],
) -> MessageRecord | None:
    """The message a status is about, among the messages of the channel it came for: by Meta's id, or
    by ours (biz_opaque_callback_data) while the message's wamid is unknown (its send's reply was lost).
    A status parked before parked statuses kept their channel (`channel_id` None) goes by Meta's id alone."""
    message = by_wamid.get(update.id)
    if message is None and channel_id is not None and update.biz_opaque_callback_data:
        ours = by_id.get(update.biz_opaque_callback_data)
        if ours is not None and ours.upstream_message_id is None:
            message = ours
    if message is None or channel_id is None or message.channel_id == channel_id:
        return message
    return None


@dataclass
class StatusesApplied:
    """What a round of Meta statuses did: the status changes, and the messages whose send had no
    known outcome (its reply never came back) that a status settled: their send rows are done."""

    changes: list[StatusChange] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)

    def add(self, other: StatusesApplied) -> None:
        self.changes += other.changes
        self.settled += other.settled


_messages = table_of(Message)
# What applying a status may change on a message (`apply_status`, `settle_cost`, `_learn_recipient`,
# a wamid learned from a status, a held send's `upstream_status` cleared): `_write_statuses` writes
# these, and refuses a message on which anything else changed (it would be lost when the message
# leaves the session).
_STATUS_COLUMNS = (
    "status",
    "status_history",
    "external_error",
    "updated_at",
    "cost_micros",
    "cost_category",
    "user_id",
    "phone_number",
    "upstream_message_id",
    "upstream_status",
)
_STATUS_COLUMN_SET = frozenset(_STATUS_COLUMNS)
# The statements every batch of Meta's webhooks runs, built once with their values bound at execution.
_MESSAGES_OF_STATUSES = select(*(_messages.c[name] for name in MESSAGE_COLUMNS)).where(
    Message.direction == Direction.outbound,
    or_(
        Message.upstream_message_id.in_(bindparam("wamids", expanding=True)),
        Message.id.in_(bindparam("ours", expanding=True)),
    ),
)


def apply_status_payloads(
    session: Session,
    statuses: Sequence[tuple[int | None, StatusUpdate]],
    *,
    park_unknown: bool = True,
    prices: Prices | None = None,
) -> StatusesApplied:
    """Apply Meta statuses, each with the id of the channel it came for, to our messages; statuses
    for wamids not known on their channel are parked. The caller settles the sends of what it
    returns as `settled`. `prices`: what a category Meta names in `pricing` costs."""
    parsed = [
        (update, status, channel_id)
        for channel_id, update in statuses
        if (status := _STATUS.get(update.status)) is not None
    ]
    if not parsed:
        return StatusesApplied()
    wamids = {u.id for u, _, _ in parsed}
    our_ids = {u.biz_opaque_callback_data for u, _, _ in parsed if u.biz_opaque_callback_data}
    found = session.connection().execute(
        _MESSAGES_OF_STATUSES, {"wamids": list(wamids), "ours": list(our_ids)}
    )
    messages = [MessageRecord(row) for row in found]
    by_id = {m.id: m for m in messages}
    by_wamid = {m.upstream_message_id: m for m in messages if m.upstream_message_id}
    changes: list[StatusChange] = []
    settled: list[str] = []
    # Oldest first, so that history reads in the order things happened when Meta's webhooks are reordered.
    for update, status, channel_id in sorted(parsed, key=lambda p: (p[0].timestamp, _ORDER[p[1]])):
        message = _match(update, channel_id, by_wamid, by_id)
        if message is None:
            if park_unknown:
                session.add(
                    ParkedStatus(
                        upstream_message_id=update.id,
                        channel_id=channel_id,
                        payload=update.payload,
                        received_at=utcnow(),
                    )
                )
            continue
        if message.upstream_message_id is None:
            # The send's own result never came back (timeout, crash): this webhook settles it.
            message.upstream_message_id = update.id
            by_wamid[update.id] = message
            settled.append(message.id)
        if message.upstream_status is not None:
            # Meta held the send (template pacing, API.md section 14): its first status moves it on.
            message.upstream_status = None
        _learn_recipient(message, update)
        settle_cost(message, update, prices)
        change = apply_status(message, status, at=update.timestamp, external_error=_external_error(update))
        if change:
            changes.append(change)
    _write_statuses(session, messages)
    applied = StatusesApplied(changes, settled)
    if settled:
        wamids_settled = [by_id[m].upstream_message_id or "" for m in settled]
        applied.add(apply_parked_statuses(session, wamids_settled, prices=prices))
    session.flush()
    return applied


@cache
def _write_statuses_statement(dialect: str) -> Update:
    """What the statuses changed, for all the messages at once: on PostgreSQL from one JSON
    parameter (`rows_from_json`), so the driver handles one value, not nine per message (an
    executemany: a quarter of applying a batch, docs/decisions/0003-status-webhooks.md); on SQLite an
    executemany of one row each."""
    if dialect == "postgresql":
        rows = rows_from_json(_messages, "rows")
        return (
            _messages.update()
            .where(_messages.c.id == rows.c.id)
            .values({column: rows.c[column] for column in _STATUS_COLUMNS})
        )
    return (
        _messages.update()
        .where(_messages.c.id == bindparam("message_id"))
        .values({column: bindparam(column) for column in _STATUS_COLUMNS})
    )


def _write_statuses(session: Session, messages: list[MessageRecord]) -> None:
    """Write what the statuses changed in one statement for all the messages. A message on which
    anything else changed is refused: this statement would not write it."""
    dialect = dialect_name(session)
    key = "id" if dialect == "postgresql" else "message_id"  # a row's column, or the statement's parameter
    changed = []
    for message in messages:
        if not message.changed:
            continue
        if not _STATUS_COLUMN_SET.issuperset(message.changed):
            unlisted = sorted(message.changed - _STATUS_COLUMN_SET)
            raise RuntimeError(f"applying a status changed {unlisted}: add them to _STATUS_COLUMNS")
        changed.append({key: message.id} | {c: getattr(message, c) for c in _STATUS_COLUMNS})
    if changed:
        parameters = {"rows": changed} if dialect == "postgresql" else changed
        session.connection().execute(_write_statuses_statement(dialect), parameters)


def _learn_recipient(message: MessageRecord, update: StatusUpdate) -> None:
    """A message to a number learns its customer's user id from its statuses, and one to a user id
    its number, when Meta shows them (API.md section 13)."""
    if message.user_id is None and update.recipient_user_id:
        message.user_id = update.recipient_user_id[:USER_ID_LENGTH]
    if message.phone_number is None and update.recipient_id:
        message.phone_number = phone_of_wa_id(update.recipient_id)


_parked = table_of(ParkedStatus)
# What `apply_parked_rows` reads of a parked status.
_PARKED_COLUMNS = (_parked.c.id, _parked.c.channel_id, _parked.c.payload)
_PARKED_FOR = select(*_PARKED_COLUMNS).where(
    _parked.c.upstream_message_id.in_(bindparam("wamids", expanding=True))
)
_UNPARK = delete(_parked).where(_parked.c.id.in_(bindparam("ids", expanding=True)))


def parked_statuses_for(wamids: Any) -> Select[Any]:
    """The statuses parked for these wamids (an expression: a statement of the caller's may find
    them in the same round trip as its own work); rows for `apply_parked_rows`."""
    return select(*_PARKED_COLUMNS).where(_parked.c.upstream_message_id == any_(wamids))


def apply_parked_statuses(
    session: Session, wamids: list[str], *, prices: Prices | None = None
) -> StatusesApplied:
    """Statuses that came before their send result: apply them now that the wamid is known. Asked
    after every round of send results, almost always of none: the statements are built once."""
    parked = session.connection().execute(_PARKED_FOR, {"wamids": wamids}).all()
    return apply_parked_rows(session, parked, prices=prices)


def apply_parked_rows(
    session: Session, parked: Sequence[Any], *, prices: Prices | None = None
) -> StatusesApplied:
    """Apply the parked statuses read by `_PARKED_FOR` or `parked_statuses_for`, and unpark them."""
    if not parked:
        return StatusesApplied()
    session.connection().execute(_UNPARK, {"ids": [row.id for row in parked]})
    updates = [(row.channel_id, StatusUpdate.from_dict(row.payload)) for row in parked]
    return apply_status_payloads(session, updates, park_unknown=False, prices=prices)
