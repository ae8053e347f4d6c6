"""The events about messages: a status change (`message_updated`, a status_callback's report), a new
message (`message_created`), and the `after_seconds` reports due now. Written with the change they
report, through events.publish (deliveries and their outbox rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete, insert, select
from sqlalchemy.orm import Session

from wagate.conversations.models import HANDLED_BY_APP, Conversation
from wagate.core.db import utcnow
from wagate.core.live import LiveChange, LiveKind, record_live
from wagate.core.tables import table_of
from wagate.events.models import DeliveryKind, EventKind
from wagate.events.publish import REPORT_BATCH, NewDelivery, ordering_key, subscribers, write_deliveries
from wagate.events.subscriptions import Subscriptions
from wagate.messages.models import Message
from wagate.messages.schemas import message_view
from wagate.messages.status import StatusChange
from wagate.outbox.models import JobKind, OutboxJob, Priority, outbox_row

_INSERT_OUTBOX = insert(table_of(OutboxJob))


def publish_status_changes(
    session: Session, changes: list[StatusChange], subscriptions: Subscriptions | None = None
) -> int:
    """`message_updated` for the account's webhooks and `status_changed` for the message's callback,
    and the live changes for the dashboard (whoever subscribes to events).

    `subscriptions`: the cached snapshot; without it the webhooks are read from the database."""
    if not changes:
        return 0
    record_live(
        session,
        [
            LiveChange(
                c.account_id,
                c.view["channel_id"],
                c.conversation_id,
                LiveKind.status,
                message_id=c.message_id,
            )
            for c in changes
        ],
    )
    webhooks = subscribers(session, subscriptions, {c.account_id for c in changes}, EventKind.message_updated)
    wanted = [
        c for c in changes if c.announced and (c.account_id in webhooks or _on_change(c.status_callback))
    ]
    if not wanted:
        return 0
    conversations = {
        conversation_id: (status, handled_by)
        for conversation_id, status, handled_by in session.execute(
            select(Conversation.id, Conversation.status, Conversation.handled_by).where(
                Conversation.id.in_({c.conversation_id for c in wanted})
            )
        )
    }
    deliveries: list[NewDelivery] = []
    for change in wanted:
        view = change.view
        status, handled_by = conversations.get(change.conversation_id, (None, None))
        view["conversation"]["status"] = status.value if status is not None else None
        view["conversation"]["handled_by"] = handled_by or HANDLED_BY_APP
        for webhook_id in webhooks.get(change.account_id, ()):
            deliveries.append(
                NewDelivery(
                    account_id=change.account_id,
                    kind=DeliveryKind.message_updated,
                    body={
                        "event": "message_updated",
                        "account_id": change.account_id,
                        "previous_status": change.previous.value,
                        "message": view,
                    },
                    message_id=change.message_id,
                    ordering_key=ordering_key(webhook_id, change.message_id),
                    webhook_id=webhook_id,
                )
            )
        callback = change.status_callback
        if callback is not None and _on_change(callback):
            deliveries.append(
                _callback_delivery(
                    change.account_id,
                    callback,
                    message_id=change.message_id,
                    reason="status_changed",
                    previous=change.previous.value,
                    view=view,
                    ordered=True,
                )
            )
    return write_deliveries(session, deliveries)


def _on_change(callback: dict[str, Any] | None) -> bool:
    return bool(callback and callback.get("on_change"))


def _callback_delivery(
    account_id: int,
    callback: dict[str, Any],
    *,
    message_id: str,
    reason: str,
    previous: str | None,
    view: dict[str, Any],
    ordered: bool,
) -> NewDelivery:
    return NewDelivery(
        account_id=account_id,
        kind=DeliveryKind.message_status,
        body={"event": "message_status", "reason": reason, "previous_status": previous, "message": view},
        message_id=message_id,
        ordering_key=ordering_key(None, message_id) if ordered else None,
        url=callback["url"],
        secret_encrypted=callback.get("secret_encrypted"),
    )


def schedule_status_reports(connection: Connection, reports: list[tuple[str, int]], *, now: datetime) -> None:
    """`after_seconds` reports (message id, N): rows due at acceptance + N, stored with the messages."""
    rows = []
    for message_id, after_seconds in reports:
        rows.append(
            outbox_row(
                JobKind.status_report,
                payload={},
                run_at=now + timedelta(seconds=after_seconds),
                priority=Priority.background,
                now=now,
                message_id=message_id,
            )
        )
    connection.execute(_INSERT_OUTBOX, rows)


def due_reports(session: Session, *, limit: int = REPORT_BATCH) -> list[int]:
    """The outbox rows of `after_seconds` reports that are due, oldest first."""
    due = (
        select(OutboxJob.id)
        .where(OutboxJob.kind == JobKind.status_report, OutboxJob.run_at <= utcnow())
        .order_by(OutboxJob.run_at)
        .limit(limit)
    )
    return list(session.scalars(due))


def render_reports(session: Session, job_ids: Sequence[int]) -> int:
    """Turn these due `after_seconds` reports into deliveries carrying the message as it is now.

    A report another process rendered meanwhile is gone from the outbox and is skipped."""
    message_ids = list(
        session.scalars(
            delete(OutboxJob)
            .where(OutboxJob.id.in_(job_ids), OutboxJob.kind == JobKind.status_report)
            .returning(OutboxJob.message_id)
        )
    )
    if not message_ids:
        return 0
    rows = session.execute(
        select(Message, Conversation.status, Conversation.handled_by)
        .join(Conversation, Conversation.id == Message.conversation_id)
        .where(Message.id.in_([m for m in message_ids if m]))
    )
    deliveries: list[NewDelivery] = []
    for message, conversation_status, handled_by in rows:
        callback = message.status_callback
        if not callback or not callback.get("url"):
            continue
        history = message.status_history
        deliveries.append(
            _callback_delivery(
                message.account_id,
                callback,
                message_id=message.id,
                reason="after_seconds",
                previous=history[-2]["status"] if len(history) > 1 else None,
                view=message_view(
                    message, conversation_status=conversation_status.value, handled_by=handled_by
                ),
                # One report, due at its own time: it must not wait behind the message's other events.
                ordered=False,
            )
        )
    return write_deliveries(session, deliveries)


def publish_messages_created(
    session: Session,
    created: list[tuple[Message, str]],
    subscriptions: Subscriptions | None = None,
    *,
    handled_by: Mapping[int, str] | None = None,
) -> int:
    """`message_created` for each (message, its conversation's status): API sends and customer
    messages. `handled_by`: who holds each conversation, by its id, when not the app (a send takes
    every conversation back, API.md section 14)."""
    if not created:
        return 0
    webhooks = subscribers(
        session, subscriptions, {m.account_id for m, _ in created}, EventKind.message_created
    )
    deliveries = [
        NewDelivery(
            account_id=message.account_id,
            kind=DeliveryKind.message_created,
            body={
                "event": "message_created",
                "account_id": message.account_id,
                "direction": message.direction.value,
                "message": message_view(
                    message,
                    conversation_status=conversation_status,
                    handled_by=(handled_by or {}).get(message.conversation_id, HANDLED_BY_APP),
                ),
            },
            message_id=message.id,
            # Same key as the message's `message_updated` events: created always arrives first.
            ordering_key=ordering_key(webhook_id, message.id),
            webhook_id=webhook_id,
        )
        for message, conversation_status in created
        for webhook_id in webhooks.get(message.account_id, ())
    ]
    return write_deliveries(session, deliveries)
