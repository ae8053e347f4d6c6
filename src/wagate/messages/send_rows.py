"""What an accepted send writes (`messages.repository.store_sends`): its message row, its outbox
payload, the last message its conversation keeps, its contact; and, on PostgreSQL, all of it for
sends by number in one statement."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Select, insert, select
from sqlalchemy.orm import Session

from wagate.conversations.last_message import LastMessage, written_by
from wagate.conversations.service import (
    contacts_and_conversations,
    contacts_of_numbers,
    contacts_of_user_ids,
)
from wagate.core.db import isoformat
from wagate.core.tables import insert_from_json, rows_from_json, table_of
from wagate.messages.models import Direction, Message, MessageStatus, PreparedSend
from wagate.outbox.models import OutboxJob
from wagate.templates.render import render_template_text


@cache
def sends_by_number() -> Select[Any]:
    """PostgreSQL: what `store_sends` writes for sends by number, in one statement: the contacts and
    conversations (`contacts_and_conversations`), the messages (each given its number's
    conversation) and the outbox rows (in the sends' order, so their ids are), from the rows as
    JSON (`rows_from_json`). Rows: (message id, conversation id, outbox id) of each send."""
    messages, outbox = table_of(Message), table_of(OutboxJob)
    of_number = contacts_and_conversations().cte("of_number")
    sends = rows_from_json(messages, "messages")
    message_columns = [column.name for column in messages.c if column.name != "conversation_id"]
    stored = (
        insert(messages)
        .from_select(
            [*message_columns, "conversation_id"],
            select(*(sends.c[name] for name in message_columns), of_number.c.conversation_id).join_from(
                sends, of_number, of_number.c.phone_number == sends.c.phone_number
            ),
        )
        .returning(messages.c.id, messages.c.conversation_id)
        .cte("stored")
    )
    queued = insert_from_json(outbox, "jobs").returning(outbox.c.id, outbox.c.message_id).cte("queued")
    return select(stored.c.id, stored.c.conversation_id, queued.c.id).join_from(
        stored, queued, queued.c.message_id == stored.c.id
    )


def last_message_of(send: PreparedSend) -> LastMessage:
    """What a send's conversation keeps of it (its list row; whether it answers the customer)."""
    template = send.template.template if send.template is not None else None
    by = written_by(
        inbound=False, template=template is not None, agent_user_id=send.agent_user_id, sent_by=None
    )
    # A template's body as the customer read it (the thread shows the same; a few microseconds).
    text = send.text
    if template is not None and send.template is not None:
        text = render_template_text(template.components, send.template.values).body or None
    return LastMessage(
        by,
        text=text,
        template_name=template.name if template is not None else None,
        agent_user_id=send.agent_user_id,
    )


def send_payload(send: PreparedSend) -> dict[str, Any]:
    """What the dispatcher needs of a send beyond its row: Meta's request body, the validity period,
    the request that accepted it (its log line names it); absent keys cost nothing to store."""
    payload: dict[str, Any] = {"body": send.upstream_body}
    if send.validity_seconds:
        payload["validity_seconds"] = send.validity_seconds
    if send.request_id:
        payload["request_id"] = send.request_id
    return payload


def contacts_of(session: Session, sends: list[PreparedSend]) -> dict[str, int]:
    """Each send's contact (message id -> contact id): by number, made when new (one statement), or by
    user id; a user id no one has seen gets a contact without a number."""
    account_id = sends[0].account_id
    # Each number once: single sends merged in one batch may go to one number twice (two codes).
    numbers = list(
        dict.fromkeys(s.phone_number for s in sends if s.contact_id is None and s.phone_number is not None)
    )
    by_number = contacts_of_numbers(session, account_id=account_id, phone_numbers=numbers) if numbers else {}
    new_users = list(
        dict.fromkeys(
            s.user_id for s in sends if s.contact_id is None and s.phone_number is None and s.user_id
        )
    )
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


def message_row(send: PreparedSend, conversation_id: int | None, now: datetime) -> dict[str, Any]:
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
