"""Accepting a send: every check first, then message + conversation + outbox row in one transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.accounts.auth import Principal
from wagate.channels.service import channel_for_member
from wagate.config import Settings
from wagate.conversations.models import Conversation, ConversationStatus
from wagate.conversations.service import (
    find_conversation,
    status_after_send,
    statuses_before,
    touch_after_sends,
    window_of,
)
from wagate.db import isoformat, table_of, utcnow
from wagate.errors import MessageNotFound, TemplateParametersMismatch, WindowClosed
from wagate.events.models import EventKind
from wagate.events.publish import ConversationChange, publish_conversation_changes
from wagate.events.subscriptions import NO_SUBSCRIPTIONS, Subscriptions
from wagate.events.urls import check_url
from wagate.ids import new_id
from wagate.lookups import Lookups
from wagate.messages.events import publish_messages_created, schedule_status_reports
from wagate.messages.models import Direction, Message, MessageStatus, SentAs
from wagate.messages.schemas import SendMessageRequest, StatusCallback, TemplateRef, message_view
from wagate.outbox.models import FastClaim, JobKind, OutboxJob, Priority, outbox_row
from wagate.outbox.notify import notify_outbox
from wagate.phones import normalize_phone_number, whatsapp_digits
from wagate.security import SecretBox
from wagate.templates.models import Template
from wagate.templates.service import require_approved
from wagate.templates.variables import bind_parameters, send_components
from wagate.whatsapp.payloads import template_message, text_message


@dataclass(frozen=True)
class BoundTemplate:
    template: Template
    values: dict[str, str]
    parameters: Any  # as the caller gave them, for the message record


@dataclass(frozen=True)
class PreparedSend:
    """A checked send, ready to be stored: everything the write transaction needs, nothing to look up."""

    message_id: str
    account_id: int
    channel_id: int
    phone_number: str
    sent_as: SentAs
    text: str | None
    template: BoundTemplate | None
    upstream_body: dict[str, Any]
    conversation_status: ConversationStatus | None
    status_callback: dict[str, Any] | None
    cost_micros: int
    currency: str
    priority: Priority = Priority.single
    batch_id: str | None = None
    # Who takes which events (the cached snapshot): `message_created` and `conversation_status_changed`
    # cost the send nothing when nobody does.
    subscriptions: Subscriptions = NO_SUBSCRIPTIONS

    @property
    def announced(self) -> bool:
        """Whether storing it writes events (message_created, conversation_status_changed)."""
        kinds = self.subscriptions.by_account.get(self.account_id, {})
        return EventKind.message_created in kinds or EventKind.conversation_status_changed in kinds


async def bind_template(lookups: Lookups, *, channel_id: int, ref: TemplateRef, field: str) -> BoundTemplate:
    found = await lookups.template(channel_id, ref.name, ref.language)
    template = require_approved(found, name=ref.name, language=ref.language)
    values = bind_parameters(template.variables, ref.parameters)
    if isinstance(values, str):
        raise TemplateParametersMismatch(
            f"Template '{ref.name}' takes {len(template.variables)} parameters: {values}.",
            details=[{"field": f"{field}.parameters", "issue": values}],
        )
    return BoundTemplate(template, values, ref.parameters)


def _price_micros(settings: Settings, category: str | None) -> int:
    if category is None:
        return 0
    return int(settings.prices.get(category, Decimal(0)) * 1_000_000)


def _encrypt_callback(callback: dict[str, Any] | None, box: SecretBox) -> dict[str, Any] | None:
    if callback is None:
        return None
    stored = {k: v for k, v in callback.items() if v is not None and k != "secret"}
    if callback.get("secret"):
        stored["secret_encrypted"] = box.encrypt(callback["secret"])
    if "on_change" not in stored and "after_seconds" not in stored:
        stored["on_change"] = True
    return stored


async def prepare_send(
    lookups: Lookups,
    *,
    principal: Principal,
    request: SendMessageRequest,
    settings: Settings,
    secret_box: SecretBox,
) -> PreparedSend:
    """Run every check of API.md section 4 (404, 403, then each 422) without writing anything."""
    channel = await lookups.channel(principal, request.channel_id)
    phone_number = normalize_phone_number(str(request.phone_number))
    fallback = None
    if request.fallback_template is not None:
        # Checked even while the window is open: a broken fallback shows now, not on the day it is needed.
        fallback = await bind_template(
            lookups, channel_id=channel.id, ref=request.fallback_template, field="fallback_template"
        )
    bound: BoundTemplate | None = None
    if request.template is not None:
        bound = await bind_template(lookups, channel_id=channel.id, ref=request.template, field="template")
    else:
        async with lookups.db.read() as session:
            conversation = await find_conversation(
                session, account_id=principal.account_id, channel_id=channel.id, phone_number=phone_number
            )
        if not window_of(conversation.last_customer_message_at if conversation else None).open:
            if fallback is None:
                raise WindowClosed(details=[{"field": "text", "issue": "the 24-hour window is closed"}])
            bound = fallback

    callback = await checked_callback(
        request.status_callback, lookups=lookups, settings=settings, box=secret_box
    )
    return build_send(
        account_id=principal.account_id,
        channel_id=channel.id,
        phone_number=phone_number,
        text=request.text,
        bound=bound,
        conversation_status=request.conversation_status,
        status_callback=callback,
        settings=settings,
        subscriptions=await lookups.subscriptions(),
    )


async def checked_callback(
    callback: StatusCallback | None, *, lookups: Lookups, settings: Settings, box: SecretBox
) -> dict[str, Any] | None:
    """The status_callback as stored: its URL checked by the SSRF guard, its secret encrypted."""
    if callback is None:
        return None
    await check_url(
        callback.url,
        allow_private=settings.allow_private_urls,
        field="status_callback.url",
        public_hosts=lookups.public_hosts,
    )
    return _encrypt_callback(callback.model_dump(), box)


def build_send(
    *,
    account_id: int,
    channel_id: int,
    phone_number: str,
    text: str | None,
    bound: BoundTemplate | None,
    conversation_status: str | None,
    status_callback: dict[str, Any] | None,
    settings: Settings,
    subscriptions: Subscriptions,
    priority: Priority = Priority.single,
    batch_id: str | None = None,
) -> PreparedSend:
    """A checked send with its Cloud API body and price (a single message, or one of a batch)."""
    message_id = new_id("msg")
    to = whatsapp_digits(phone_number)
    if bound is None:
        assert text is not None
        upstream_body = text_message(to, text, message_id)
    else:
        template = bound.template
        components = send_components(
            variables=template.variables,
            values=bound.values,
            category=template.category,
            parameter_format=template.parameter_format,
        )
        upstream_body = template_message(to, template.name, template.language, components, message_id)
    return PreparedSend(
        subscriptions=subscriptions,
        message_id=message_id,
        account_id=account_id,
        channel_id=channel_id,
        phone_number=phone_number,
        sent_as=SentAs.session if bound is None else SentAs.template,
        text=text,
        template=bound,
        upstream_body=upstream_body,
        conversation_status=ConversationStatus(conversation_status) if conversation_status else None,
        status_callback=status_callback,
        cost_micros=_price_micros(settings, bound.template.category if bound else None),
        currency=settings.currency,
        priority=priority,
        batch_id=batch_id,
    )


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
    numbers = [send.phone_number for send in sends]
    conversation_status = status_after_send(first.conversation_status)
    conversation_webhooks = subscriptions.webhooks(account_id, EventKind.conversation_status_changed)
    previous: dict[str, str] = {}
    if conversation_webhooks:  # only then is the status before the send worth a query
        previous = statuses_before(
            session, account_id=account_id, channel_id=channel_id, phone_numbers=numbers
        )
    conversation_of = touch_after_sends(
        session,
        account_id=account_id,
        channel_id=channel_id,
        phone_numbers=numbers,
        status=conversation_status,
    )
    # Core statements built once, with values at execution: this runs for every accepted message,
    # and the ORM's unit of work (or a statement compiled anew) costs more than the SQL itself.
    connection = session.connection()
    message_rows = [_message_row(send, conversation_of[send.phone_number], now) for send in sends]
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
    if subscriptions.webhooks(account_id, EventKind.message_created):
        created = [(Message(**row), conversation_status.value) for row in message_rows]
        publish_messages_created(session, created, subscriptions)
    if conversation_webhooks:
        changes = [
            ConversationChange(
                account_id,
                conversation_of[number],
                channel_id,
                number,
                previous.get(number),
                conversation_status.value,
            )
            for number in numbers
        ]
        publish_conversation_changes(session, changes, subscriptions)
    if notify_others:
        notify_outbox(session, channel_id)
    return job_ids


def _message_row(send: PreparedSend, conversation_id: int, now: datetime) -> dict[str, Any]:
    template = send.template.template if send.template else None
    return {
        "id": send.message_id,
        "account_id": send.account_id,
        "channel_id": send.channel_id,
        "conversation_id": conversation_id,
        "direction": Direction.outbound,
        "phone_number": send.phone_number,
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
        "batch_id": send.batch_id,
        "status_callback": send.status_callback,
        "status_history": [{"status": MessageStatus.sent.value, "at": isoformat(now) or ""}],
        "created_at": now,
        "updated_at": now,
    }


async def read_message(session: AsyncSession, *, principal: Principal, message_id: str) -> dict[str, Any]:
    row = (
        await session.execute(
            select(Message, Conversation.status)
            .join(Conversation, Conversation.id == Message.conversation_id)
            .where(
                Message.id == message_id,
                Message.account_id == principal.account_id,
                Message.direction == Direction.outbound,
            )
        )
    ).one_or_none()
    if row is None:
        raise MessageNotFound()
    message, conversation_status = row
    await channel_for_member(session, principal=principal, channel_id=message.channel_id)
    return message_view(message, conversation_status=ConversationStatus(conversation_status).value)
