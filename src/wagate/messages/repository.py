"""The SQL of sent messages: the writes of accepted sends (a message, its conversation and its outbox
row, for a single send or a whole batch) in a handful of Core statements, with the events they
cause; and the reads of one message, a conversation's thread, the message list and its failures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, case, func, insert, select, tuple_, union_all, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.conversations.models import Conversation, ConversationStatus
from wagate.conversations.service import status_after_send, statuses_before, touch_after_sends
from wagate.core.db import dialect_name, utcnow
from wagate.core.live import LiveChange, LiveKind, record_live
from wagate.core.tables import table_of
from wagate.events.models import EventKind
from wagate.events.publish import ConversationChange, publish_conversation_changes
from wagate.messages.events import publish_messages_created, schedule_status_reports
from wagate.messages.models import Direction, Message, MessageStatus, PreparedSend, SentMessage
from wagate.messages.send_rows import contacts_of, last_message_of, message_row, send_payload, sends_by_number
from wagate.outbox.models import FastClaim, JobKind, OutboxJob, outbox_row
from wagate.outbox.notify import notify_outbox

_INSERT_MESSAGE = insert(table_of(Message))
_INSERT_OUTBOX = insert(table_of(OutboxJob))
# Each row's id with its message's (one per send): matched by message, not by order, because
# SQLAlchemy can only keep the rows' order on SQLite by inserting them one statement each.
_INSERT_OUTBOX_RETURNING_IDS = _INSERT_OUTBOX.returning(
    table_of(OutboxJob).c.id, table_of(OutboxJob).c.message_id
)


def store_sends(
    session: Session,
    sends: list[PreparedSend],
    *,
    notify_others: bool = True,
    claims: Sequence[FastClaim | None] | None = None,
    ids: bool = False,
) -> list[int]:
    """Messages of one account and channel (a single send, single sends merged in one batch, or a
    bulk batch) with their conversations and outbox rows: a handful of statements however many there
    are. `notify_others`: wake dispatchers of other processes (PostgreSQL NOTIFY); needless when this
    process's own dispatcher sends for the channel. `claims`: each send's room in its lane (see
    `FastClaim`), if any: its row is born `in_flight` (the attempt record), so the lane can call Meta
    the moment this commits. Returns the outbox ids of the sends, in order, when `ids` asks for them
    (a bulk batch's are not needed, and not read back)."""
    if not sends:
        return []
    now = utcnow()
    first = sends[0]
    account_id, channel_id, subscriptions = first.account_id, first.channel_id, first.subscriptions
    conversation_status = status_after_send(first.conversation_status)
    conversation_webhooks = subscriptions.webhooks(account_id, EventKind.conversation_status_changed)
    outbox_rows = [
        outbox_row(
            JobKind.send_message,
            payload=send_payload(send),
            run_at=now,
            priority=send.priority,
            now=now,
            channel_id=send.channel_id,
            message_id=send.message_id,
            batch_id=send.batch_id,
            claimed_by=claim,
            expires_at=send.expires_at,
        )
        for send, claim in zip(sends, claims or [None] * len(sends), strict=True)
    ]
    previous: dict[int, str] = {}
    contact_of: dict[str, int] = {}
    conversation_of: dict[str, int] = {}
    job_of: dict[str, int] = {}  # outbox id by message id, when `ids` asks for them
    connection = session.connection()
    by_number_alone = all(send.contact_id is None and send.phone_number is not None for send in sends)
    if by_number_alone and not conversation_webhooks and dialect_name(session) == "postgresql":
        # Everything in one round trip: the writer waits on each statement, and a wait costs more
        # than the statement (docs/decisions/0002-postgresql-writer.md).
        message_rows = [message_row(send, None, now) for send in sends]
        # Each number once, with its last send (the conversation keeps it), as arrays by column.
        last_of_number = {send.phone_number or "": last_message_of(send).columns() for send in sends}
        last_columns = {
            column: [last[column] for last in last_of_number.values()]
            for column in next(iter(last_of_number.values()))
        }
        stored = connection.execute(
            sends_by_number(),
            {
                "account_id": account_id,
                "channel_id": channel_id,
                "numbers": list(last_of_number),
                "status": conversation_status,
                "now": now,
                "messages": message_rows,
                "jobs": outbox_rows,
                **last_columns,
            },
        )
        for message_id, conversation_id, job_id in stored:
            conversation_of[message_id], job_of[message_id] = conversation_id, job_id
        for row in message_rows:
            row["conversation_id"] = conversation_of[row["id"]]
    else:
        contact_of = contacts_of(session, sends)
        contact_ids = [contact_of[send.message_id] for send in sends]
        if conversation_webhooks:  # only then is the status before the send worth a query
            previous = statuses_before(session, channel_id=channel_id, contact_ids=contact_ids)
        conversation_of_contact = touch_after_sends(
            session,
            account_id=account_id,
            channel_id=channel_id,
            # Each contact's last send (a later one to the same contact replaces an earlier).
            last_messages={contact_of[send.message_id]: last_message_of(send) for send in sends},
            status=conversation_status,
        )
        for send in sends:
            conversation_of[send.message_id] = conversation_of_contact[contact_of[send.message_id]]
        # Core statements built once, with values at execution: this runs for every accepted
        # message, and the ORM's unit of work (or a statement compiled anew) costs more than the SQL.
        message_rows = [message_row(send, conversation_of[send.message_id], now) for send in sends]
        connection.execute(_INSERT_MESSAGE, message_rows)
        if not ids:
            connection.execute(_INSERT_OUTBOX, outbox_rows)
        else:
            for job_id, message_id in connection.execute(_INSERT_OUTBOX_RETURNING_IDS, outbox_rows):
                job_of[message_id] = job_id
    reports = [
        (send.message_id, send.status_callback["after_seconds"])
        for send in sends
        if send.status_callback and send.status_callback.get("after_seconds")
    ]
    if reports:
        schedule_status_reports(connection, reports, now=now)
    record_live(
        session,
        [
            LiveChange(
                account_id,
                channel_id,
                conversation_of[send.message_id],
                LiveKind.message,
                conversation_status=conversation_status.value,
                message_id=send.message_id,
            )
            for send in sends
        ],
    )
    if subscriptions.webhooks(account_id, EventKind.message_created):
        created = [(Message(**row), conversation_status.value) for row in message_rows]
        publish_messages_created(session, created, subscriptions)
    if conversation_webhooks:
        changes = [
            ConversationChange(
                account_id,
                conversation_of[send.message_id],
                channel_id,
                send.phone_number,
                previous.get(contact_of[send.message_id]),
                conversation_status.value,
                user_id=send.user_id,
            )
            for send in sends
        ]
        publish_conversation_changes(session, changes, subscriptions)
    if notify_others:
        notify_outbox(session, channel_id)
    return [job_of[send.message_id] for send in sends] if ids else []


async def sent_message(session: AsyncSession, *, account_id: int, message_id: str) -> SentMessage | None:
    row = (
        await session.execute(
            select(Message, Conversation.status, Conversation.handled_by)
            .join(Conversation, Conversation.id == Message.conversation_id)
            .where(
                Message.id == message_id,
                Message.account_id == account_id,
                Message.direction == Direction.outbound,
                Message.sent_by.is_(None),
            )
        )
    ).one_or_none()
    if row is None:
        return None
    return SentMessage(row[0], ConversationStatus(row[1]), row[2])


async def conversation_messages(session: AsyncSession, *, conversation_id: int, limit: int) -> list[Message]:
    """The conversation's last `limit` messages, oldest first (both directions)."""
    newest = await session.scalars(
        select(Message)
        .where(Message.conversation_id == conversation_id)
        .order_by(Message.created_at.desc(), Message.id.desc())
        .limit(limit)
    )
    return list(reversed(list(newest)))


@dataclass(frozen=True)
class SentFilter:
    """Which sent messages (outbound: API, bulk, agents' replies) a list shows: those of `channel_ids`
    (the caller's inboxes), narrowed by each filter given. `created_after` is inclusive and
    `created_before` exclusive, so ranges that meet neither overlap nor leave a gap."""

    channel_ids: list[int]
    phone_number: str | None = None
    status: MessageStatus | None = None
    batch_id: str | None = None
    template_name: str | None = None
    error_code: int | None = None  # Meta's code at the start of `external_error`
    created_after: datetime | None = None
    created_before: datetime | None = None


def _sent_conditions(found: SentFilter, *, with_status: bool = True) -> list[ColumnElement[bool]]:
    # Sent through the API, in bulk or by agents: not the replies of Meta's AI agent (`sent_by`).
    conditions: list[ColumnElement[bool]] = [
        Message.direction == Direction.outbound,
        Message.sent_by.is_(None),
    ]
    if found.phone_number is not None:
        conditions.append(Message.phone_number == found.phone_number)
    if with_status and found.status is not None:
        conditions.append(Message.status == found.status)
    if found.batch_id is not None:
        conditions.append(Message.batch_id == found.batch_id)
    if found.template_name is not None:
        conditions.append(Message.template_name == found.template_name)
    if found.error_code is not None:
        # Stored as "131026: Message undeliverable" (messages/meta_statuses.py, whatsapp/errors.py).
        conditions.append(Message.external_error.startswith(f"{found.error_code}:", autoescape=True))
    if found.created_after is not None:
        conditions.append(Message.created_at >= found.created_after)
    if found.created_before is not None:
        conditions.append(Message.created_at < found.created_before)
    return conditions


async def sent_cursor(
    session: AsyncSession, *, account_id: int, message_id: str
) -> tuple[datetime, str] | None:
    """(created_at, id) of a sent message of the account: where the page after it starts."""
    row = (
        await session.execute(
            select(Message.created_at, Message.id).where(
                Message.id == message_id,
                Message.account_id == account_id,
                Message.direction == Direction.outbound,
                Message.sent_by.is_(None),
            )
        )
    ).one_or_none()
    return (row[0], row[1]) if row is not None else None


async def list_sent_messages(
    session: AsyncSession,
    *,
    account_id: int,
    found: SentFilter,
    before: tuple[datetime, str] | None,
    limit: int,
) -> list[SentMessage]:
    """Up to `limit` sent messages, newest first by (created_at, id), each with its conversation's
    status (one statement, joined: no query per row).

    Each inbox is one range of ix_messages_log read backwards from `before` (a row value: a range of
    the index, not a scan), stopped after `limit` rows; several inboxes are merged (UNION ALL of those
    ranges, then the newest `limit`). So a page costs about `limit` index entries per inbox however
    large the table, and an inbox the caller does not see is never read. Filters other than the
    inbox and the dates are checked on the rows read along the way."""
    if not found.channel_ids:
        return []
    conditions = _sent_conditions(found)
    conditions.append(Message.account_id == account_id)
    if before is not None:
        conditions.append(tuple_(Message.created_at, Message.id) < tuple_(*before))

    def newest(channel_id: int) -> Select[str, datetime]:
        return (
            select(Message.id, Message.created_at)
            .where(Message.channel_id == channel_id, *conditions)
            .order_by(Message.created_at.desc(), Message.id.desc())
            .limit(limit)
        )

    if len(found.channel_ids) == 1:
        page = newest(found.channel_ids[0]).subquery("page")
    else:
        # SQLite takes ORDER BY and LIMIT only on a whole compound select: each inbox's range is a
        # subquery of its own.
        ranges = [newest(channel_id).subquery() for channel_id in found.channel_ids]
        merged = union_all(*(select(r.c.id, r.c.created_at) for r in ranges))
        page = (
            merged.order_by(merged.selected_columns.created_at.desc(), merged.selected_columns.id.desc())
            .limit(limit)
            .subquery("page")
        )
    rows = await session.execute(
        select(Message, Conversation.status, Conversation.handled_by)
        .join(page, page.c.id == Message.id)
        .join(Conversation, Conversation.id == Message.conversation_id)
        .order_by(page.c.created_at.desc(), page.c.id.desc())
    )
    return [SentMessage(message, ConversationStatus(status), held) for message, status, held in rows]


async def failure_counts(
    session: AsyncSession, *, account_id: int, found: SentFilter, hourly: bool
) -> list[tuple[str, str | None, int]]:
    """Failed sent messages counted per UTC day (or hour) and reason: rows of (`YYYY-MM-DD` or
    `YYYY-MM-DD HH`, the part of `external_error` before its first colon (Meta's code, or our own
    reason such as `expired`), count). `found.status` is not applied: these are the failures."""
    if not found.channel_ids:
        return []
    error = Message.external_error
    bucket: ColumnElement[Any]
    reason: ColumnElement[Any]
    if dialect_name(session) == "postgresql":
        at_utc = func.timezone("UTC", Message.created_at)
        bucket = func.to_char(at_utc, "YYYY-MM-DD HH24" if hourly else "YYYY-MM-DD")
        reason = func.split_part(error, ":", 1)
    else:  # SQLite keeps UTC times as text, "YYYY-MM-DD HH:MM:SS.ffffff"
        bucket = func.substr(Message.created_at, 1, 13 if hourly else 10)
        colon = func.instr(error, ":")
        reason = case((colon > 0, func.substr(error, 1, colon - 1)), else_=error)
    failures = (
        select(bucket.label("bucket"), reason.label("reason"))
        .where(
            Message.account_id == account_id,
            Message.channel_id.in_(found.channel_ids),
            Message.status == MessageStatus.failed,
            *_sent_conditions(found, with_status=False),
        )
        .subquery()
    )
    # Grouped outside: PostgreSQL would not match a GROUP BY whose expressions have bound values of
    # their own to those of the SELECT.
    rows = await session.execute(
        select(failures.c.bucket, failures.c.reason, func.count()).group_by(
            failures.c.bucket, failures.c.reason
        )
    )
    return [(str(b), r, int(n)) for b, r, n in rows]


# How far back "recently used" looks: the channel's last template sends, newest first (the message
# log's index), so the query reads a bounded range however many messages the channel has.
RECENT_SENDS_SCANNED = 500


async def recently_sent_templates(
    session: AsyncSession, *, account_id: int, channel_id: int, limit: int = 5
) -> list[tuple[str, str]]:
    """The (name, language) of the templates the account last sent from the channel, the most recent
    first, at most `limit` of them: one query."""
    recent = (
        select(Message.template_name, Message.template_language, Message.created_at)
        .where(
            Message.channel_id == channel_id,
            Message.direction == Direction.outbound,
            Message.account_id == account_id,
            Message.template_name.is_not(None),
            Message.template_language.is_not(None),
        )
        .order_by(Message.created_at.desc())
        .limit(RECENT_SENDS_SCANNED)
        .subquery()
    )
    last_sent = func.max(recent.c.created_at)
    rows = await session.execute(
        select(recent.c.template_name, recent.c.template_language)
        .group_by(recent.c.template_name, recent.c.template_language)
        .order_by(last_sent.desc())
        .limit(limit)
    )
    return [(name, language) for name, language in rows]


def move_conversation_messages(session: Session, from_conversation: int, to_conversation: int) -> None:
    """The messages of one conversation become another's (two contacts of one customer merged)."""
    session.execute(
        update(Message)
        .where(Message.conversation_id == from_conversation)
        .values(conversation_id=to_conversation)
    )
