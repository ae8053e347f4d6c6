"""The writes of accepted sends: a message, its conversation and its outbox row (a single send, or a
whole batch) in a handful of Core statements, with the events they cause.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.conversations.models import Conversation, ConversationStatus
from wagate.conversations.repository import (
    contacts_of_numbers,
    contacts_of_user_ids,
    statuses_before,
    touch_after_sends,
)
from wagate.conversations.service import status_after_send
from wagate.db import isoformat, table_of, utcnow
from wagate.events.models import EventKind
from wagate.events.publish import ConversationChange, publish_conversation_changes
from wagate.live import LiveChange, LiveKind, record_live
from wagate.messages.events import publish_messages_created, schedule_status_reports
from wagate.messages.models import Direction, Message, MessageStatus, PreparedSend, SentMessage
from wagate.outbox.models import FastClaim, JobKind, OutboxJob, outbox_row
from wagate.outbox.notify import notify_outbox

_INSERT_MESSAGE = insert(table_of(Message))
_INSERT_OUTBOX = insert(table_of(OutboxJob))
_INSERT_OUTBOX_RETURNING_ID = _INSERT_OUTBOX.returning(table_of(OutboxJob).c.id)


def store_send(
    session: Session, send: PreparedSend, *, notify_others: bool = True, claim: FastClaim | None = None
) -> int:
    """The unit of work behind a 201: the message, its conversation and its outbox row, together.

    `notify_others`: wake dispatchers of other processes (PostgreSQL NOTIFY); needless when this
    process's own dispatcher sends for the channel. `claim`: the row is born `in_flight` (the attempt
    record), so the lane can call Meta the moment this commits. Returns the outbox row's id.
    """
    return store_sends(session, [send], notify_others=notify_others, claim=claim)[0]


def store_sends(
    session: Session, sends: list[PreparedSend], *, notify_others: bool = True, claim: FastClaim | None = None
) -> list[int]:
    """Messages of one account and channel (a single send, or a batch) with their conversations and
    outbox rows: a handful of statements however many there are. Returns the outbox ids of a single
    send (a batch's are not needed, and not read back)."""
    if not sends:
        return []
    now = utcnow()
    first = sends[0]
    account_id, channel_id, subscriptions = first.account_id, first.channel_id, first.subscriptions
    contact_of = _contacts_of(session, sends)
    contact_ids = [contact_of[send.message_id] for send in sends]
    conversation_status = status_after_send(first.conversation_status)
    conversation_webhooks = subscriptions.webhooks(account_id, EventKind.conversation_status_changed)
    previous: dict[int, str] = {}
    if conversation_webhooks:  # only then is the status before the send worth a query
        previous = statuses_before(session, channel_id=channel_id, contact_ids=contact_ids)
    conversation_of_contact = touch_after_sends(
        session,
        account_id=account_id,
        channel_id=channel_id,
        contact_ids=contact_ids,
        status=conversation_status,
    )
    conversation_of = {
        send.message_id: conversation_of_contact[contact_of[send.message_id]] for send in sends
    }
    # Core statements built once, with values at execution: this runs for every accepted message,
    # and the ORM's unit of work (or a statement compiled anew) costs more than the SQL itself.
    connection = session.connection()
    message_rows = [_message_row(send, conversation_of[send.message_id], now) for send in sends]
    connection.execute(_INSERT_MESSAGE, message_rows)
    outbox_rows = [
        outbox_row(
            JobKind.send_message,
            payload={"body": send.upstream_body},
            run_at=now,
            priority=send.priority,
            now=now,
            channel_id=send.channel_id,
            message_id=send.message_id,
            batch_id=send.batch_id,
            claimed_by=claim,
        )
        for send in sends
    ]
    job_ids: list[int] = []
    if len(outbox_rows) == 1:
        job_ids.append(connection.execute(_INSERT_OUTBOX_RETURNING_ID, outbox_rows[0]).scalar_one())
    else:
        connection.execute(_INSERT_OUTBOX, outbox_rows)
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
    return job_ids


def _contacts_of(session: Session, sends: list[PreparedSend]) -> dict[str, int]:
    """Each send's contact (message id -> contact id): by number, made when new (one statement), or by
    user id; a user id no one has seen gets a contact without a number."""
    account_id = sends[0].account_id
    numbers = [s.phone_number for s in sends if s.contact_id is None and s.phone_number is not None]
    by_number = contacts_of_numbers(session, account_id=account_id, phone_numbers=numbers) if numbers else {}
    new_users = [s.user_id for s in sends if s.contact_id is None and s.phone_number is None and s.user_id]
    by_user = (
        contacts_of_user_ids(session, account_id=account_id, user_ids=new_users, parent_user_ids={})
        if new_users
        else {}
    )
    contact_of: dict[str, int] = {}
    for send in sends:
        if send.contact_id is not None:
            contact_of[send.message_id] = send.contact_id
        elif send.phone_number is not None:
            contact_of[send.message_id] = by_number[send.phone_number]
        else:
            assert send.user_id is not None  # a number or a user id, always
            contact_of[send.message_id] = by_user[send.user_id]
    return contact_of


def _message_row(send: PreparedSend, conversation_id: int, now: datetime) -> dict[str, Any]:
    template = send.template.template if send.template else None
    return {
        "id": send.message_id,
        "account_id": send.account_id,
        "channel_id": send.channel_id,
        "conversation_id": conversation_id,
        "direction": Direction.outbound,
        "phone_number": send.phone_number,
        "user_id": send.user_id,
        "status": MessageStatus.sent,
        "sent_as": send.sent_as,
        "text": send.text,
        "template_name": template.name if template else None,
        "template_language": template.language if template else None,
        "template_category": template.category if template else None,
        "template_parameters": send.template.parameters if send.template else None,
        "external_error": None,
        "upstream_message_id": None,
        "cost_micros": send.cost_micros,
        "cost_currency": send.currency,
        "cost_category": None,
        "batch_id": send.batch_id,
        "agent_user_id": send.agent_user_id,
        "status_callback": send.status_callback,
        "status_history": [{"status": MessageStatus.sent.value, "at": isoformat(now) or ""}],
        "created_at": now,
        "updated_at": now,
    }


async def sent_message(session: AsyncSession, *, account_id: int, message_id: str) -> SentMessage | None:
    row = (
        await session.execute(
            select(Message, Conversation.status)
            .join(Conversation, Conversation.id == Message.conversation_id)
            .where(
                Message.id == message_id,
                Message.account_id == account_id,
                Message.direction == Direction.outbound,
            )
        )
    ).one_or_none()
    if row is None:
        return None
    return SentMessage(row[0], ConversationStatus(row[1]))


async def conversation_messages(session: AsyncSession, *, conversation_id: int, limit: int) -> list[Message]:
    """The conversation's last `limit` messages, oldest first (both directions)."""
    newest = await session.scalars(
        select(Message)
        .where(Message.conversation_id == conversation_id)
        .order_by(Message.created_at.desc(), Message.id.desc())
        .limit(limit)
    )
    return list(reversed(list(newest)))
