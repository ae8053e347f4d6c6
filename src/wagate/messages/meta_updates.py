"""Applying Meta's webhooks: message statuses (forward only, idempotent) and customer messages."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sqlalchemy import Select, Update, any_, bindparam, delete, or_, select
from sqlalchemy.orm import Session

from wagate.channels.models import Channel
from wagate.conversations.customers import Customers, learn_customers, phone_of_wa_id
from wagate.conversations.models import (
    HANDLED_BY_AGENT,
    HANDLED_BY_APP,
    USER_ID_LENGTH,
    ConversationStatus,
)
from wagate.conversations.repository import (
    FROM_CUSTOMER,
    LastMessage,
    get_or_create_conversation,
    note_last_message,
    set_marketing_preferences,
)
from wagate.core.db import dialect_name, rows_from_json, table_of, utcnow
from wagate.core.live import LiveChange, LiveKind, record_live
from wagate.events.publish import ConversationChange, publish_conversation_changes
from wagate.events.subscriptions import Subscriptions
from wagate.messages.events import publish_messages_created, publish_status_changes
from wagate.messages.models import (
    MESSAGE_COLUMNS,
    Direction,
    Message,
    MessageRecord,
    MessageStatus,
    ParkedStatus,
)
from wagate.messages.pricing import Prices, settle_cost
from wagate.messages.standby import apply_handovers, apply_system_messages, received_message, store_echoes
from wagate.messages.status import StatusChange, apply_status
from wagate.outbox.dead_letters import bury
from wagate.templates.lifecycle import apply_template_changes
from wagate.whatsapp.payloads import (
    ChangeValue,
    CustomerRef,
    InboundMessage,
    OddItem,
    Preference,
    PreferenceUpdate,
    StatusKind,
    StatusUpdate,
    parse_webhook,
)
from wagate.whatsapp.template_events import TemplateChange

log = logging.getLogger(__name__)

_STATUS = {
    StatusKind.SENT: MessageStatus.sent,
    StatusKind.DELIVERED: MessageStatus.delivered,
    StatusKind.READ: MessageStatus.read,
    StatusKind.FAILED: MessageStatus.failed,
}
# The dead letters' kind of a webhook item that could not be applied (`wagate dead-letters` shows them).
ODD_WEBHOOK_ITEM = "meta_webhook_item"
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
_CHANNELS_OF_NUMBERS = select(Channel).where(
    Channel.phone_number_id.in_(bindparam("numbers", expanding=True))
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


def store_inbound(
    session: Session,
    *,
    channel: Channel,
    inbound: list[InboundMessage],
    customers: Customers,
    subscriptions: Subscriptions | None = None,
) -> int:
    """A customer's messages: into the conversation, opening the 24-hour window and the conversation.
    A customer known by user id alone (a username) is the number's customer when the number was
    learned for it (`customers`, from `learn_customers`). Returns how many events it wrote about them.

    A message on `standby` (API.md section 14) is one Meta's AI agent answers: it renews the window
    like any, but the conversation is the agent's, stays as it is (a new one starts resolved) and
    plays no sound. One on `messages` is the app's again: Meta routes a conversation's messages to
    whoever holds it, and a release by the agent sends no handover."""
    known = set(
        session.scalars(
            select(Message.upstream_message_id).where(
                Message.upstream_message_id.in_([m.wamid for m in inbound])
            )
        )
    )
    stored: list[tuple[Message, str]] = []
    handled_by: dict[int, str] = {}
    conversation_changes: list[ConversationChange] = []
    live: list[LiveChange] = []
    for item in inbound:
        if item.wamid in known:
            continue  # Meta delivers webhooks at least once
        known.add(item.wamid)
        phone = phone_of_wa_id(item.from_) if item.from_ else None
        contact_id = customers.contact_of(phone_number=phone, user_id=item.user_id)
        assert contact_id is not None  # learn_customers saw every message's customer
        phone = customers.phone_of.get(contact_id, phone)
        conversation, created = get_or_create_conversation(
            session,
            account_id=channel.account_id,
            channel_id=channel.id,
            contact_id=contact_id,
            initial_status=ConversationStatus.resolved if item.standby else ConversationStatus.open,
        )
        previous = None if created else conversation.status.value
        conversation.handled_by = HANDLED_BY_AGENT if item.standby else HANDLED_BY_APP
        if conversation.status is ConversationStatus.resolved and not item.standby:
            conversation.status = ConversationStatus.open
        conversation_changes.append(
            ConversationChange(
                channel.account_id,
                conversation.id,
                channel.id,
                phone,
                previous,
                conversation.status.value,
                user_id=item.user_id,
            )
        )
        last = conversation.last_customer_message_at
        conversation.last_customer_message_at = item.timestamp if last is None else max(last, item.timestamp)
        conversation.last_activity_at = utcnow()
        text = item.text if item.text is not None else f"[{item.type}]"
        # The list's row and "waiting since", in the same UPDATE as the window (the flush below).
        note_last_message(conversation, LastMessage(FROM_CUSTOMER, text), at=item.timestamp)
        message = received_message(
            channel,
            conversation.id,
            direction=Direction.inbound,
            status=MessageStatus.delivered,
            wamid=item.wamid,
            at=item.timestamp,
            text=text,
            phone_number=phone,
            user_id=item.user_id,
        )
        session.add(message)
        stored.append((message, conversation.status.value))
        handled_by[conversation.id] = conversation.handled_by
        live.append(
            LiveChange(
                channel.account_id,
                channel.id,
                conversation.id,
                LiveKind.message,
                # What the dashboard plays its sound for: not a message Meta's agent answers.
                inbound=not item.standby,
                conversation_status=conversation.status.value,
                message_id=message.id,
            )
        )
    session.flush()
    record_live(session, live)
    return publish_messages_created(session, stored, handled_by=handled_by) + publish_conversation_changes(
        session, conversation_changes
    )


def _customers_named(change: ChangeValue) -> tuple[list[CustomerRef], list[CustomerRef]]:
    """Whom a change names in a way worth learning: every customer who wrote or chose (customers of
    the account from now on), and the recipients of statuses with a user id (a number alone teaches
    nothing new), which teach only about customers the account has."""
    writers = [m.customer for m in change.messages] + [p.customer for p in change.preferences]
    writers += [echo.customer for echo in change.echoes]  # a customer Meta's agent answers
    recipients: list[CustomerRef] = [handover.customer for handover in change.handovers]
    if change.statuses:
        recipients += [c for c in change.contacts if c.user_id]
        recipients += [
            CustomerRef(s.recipient_id or None, s.recipient_user_id)
            for s in change.statuses
            if s.recipient_user_id
        ]
    return writers, recipients


def _bury_odd_items(session: Session, odd: list[OddItem]) -> None:
    """Items no rule applies to, kept for an operator (`wagate dead-letters`) with the reason."""
    if not odd:
        return
    log.warning("%d items of Meta webhooks could not be applied and were kept as dead letters", len(odd))
    for item in odd:
        bury(
            session,
            kind=ODD_WEBHOOK_ITEM,
            payload={"phone_number_id": item.phone_number_id, "item": item.item},
            error=item.reason,
            reference=item.phone_number_id,
        )


@dataclass(frozen=True)
class WebhooksApplied:
    events: int  # how many events it wrote (the event lane has work only when some were)
    settled: list[str]  # messages whose unconfirmed sends a status settled (see StatusesApplied)
    statuses: int = 0  # message statuses that changed a message (a repeat or a late one changes none)
    # Templates a lifecycle webhook changed: once committed, this process's template cache is stale.
    templates: int = 0


def process_webhook_bodies(
    session: Session,
    bodies: list[dict[str, Any]],
    subscriptions: Subscriptions | None = None,
    *,
    prices: Prices | None = None,
) -> WebhooksApplied:
    """Everything in a batch of stored Meta webhook bodies, in one transaction with its events.

    Each change names its channel by phone number id: what it says applies to that channel's messages
    and conversations only. What cannot be applied (a change for a number no channel has, an item of a
    shape not understood) is kept as a dead letter and the rest is applied (API.md section 13)."""
    changes: list[ChangeValue] = []
    odd: list[OddItem] = []
    templates: list[TemplateChange] = []
    for body in bodies:
        parsed = parse_webhook(body)
        changes += parsed.changes
        odd += parsed.odd
        templates += parsed.templates
    numbers = {change.phone_number_id for change in changes}
    channels = (
        {c.phone_number_id: c for c in session.scalars(_CHANNELS_OF_NUMBERS, {"numbers": sorted(numbers)})}
        if numbers
        else {}
    )
    odd += [
        OddItem(
            f"no channel has phone number id {change.phone_number_id}", change.raw, change.phone_number_id
        )
        for change in changes
        if change.phone_number_id not in channels
    ]
    changes = [change for change in changes if change.phone_number_id in channels]
    lifecycle = apply_template_changes(session, templates, subscriptions)  # about WABAs, not numbers
    odd += lifecycle.odd
    _bury_odd_items(session, odd)
    if not changes:
        return WebhooksApplied(lifecycle.events, [], templates=lifecycle.changed)
    for change in changes:
        if change.system_messages:  # a user id change first: the batch's customers are then learned
            notices = list(change.system_messages)
            apply_system_messages(session, channel=channels[change.phone_number_id], notices=notices)
    named: dict[int, tuple[list[CustomerRef], list[CustomerRef]]] = {}
    for change in changes:
        writers, recipients = named.setdefault(channels[change.phone_number_id].account_id, ([], []))
        more_writers, more_recipients = _customers_named(change)
        writers += more_writers
        recipients += more_recipients
    customers = {
        account_id: learn_customers(session, account_id=account_id, refs=writers, known_only=recipients)
        for account_id, (writers, recipients) in named.items()
    }
    scoped = [(channels[c.phone_number_id].id, status) for c in changes for status in c.statuses]
    applied = apply_status_payloads(session, scoped, prices=prices)
    events = publish_status_changes(session, applied.changes, subscriptions)
    inbound_by_channel: dict[str, list[InboundMessage]] = {}
    for change in changes:
        channel = channels[change.phone_number_id]
        if change.messages:
            inbound_by_channel.setdefault(change.phone_number_id, []).extend(change.messages)
        if change.preferences:
            _record_preferences(session, channel.id, change.preferences, customers[channel.account_id])
    for number, inbound in inbound_by_channel.items():
        channel = channels[number]
        events += store_inbound(
            session, channel=channel, inbound=inbound, customers=customers[channel.account_id]
        )
    # The replies of Meta's AI agent after the customer's messages they answer (a thread shows Meta's
    # whole seconds, then the order stored); their statuses, parked meanwhile, apply to them then.
    echoed: list[str] = []
    for change in changes:
        if change.echoes:
            channel = channels[change.phone_number_id]
            customers_of = customers[channel.account_id]
            echoed += store_echoes(
                session, channel=channel, echoes=list(change.echoes), customers=customers_of
            )
    if echoed:
        parked = apply_parked_statuses(session, echoed, prices=prices)
        events += publish_status_changes(session, parked.changes, subscriptions)
        applied.add(parked)
    for change in changes:  # last: a handover says who holds the conversation after what came with it
        if change.handovers:
            channel = channels[change.phone_number_id]
            handovers = list(change.handovers)
            apply_handovers(
                session, channel=channel, handovers=handovers, customers=customers[channel.account_id]
            )
    events += lifecycle.events
    return WebhooksApplied(events, applied.settled, len(applied.changes), lifecycle.changed)


def _record_preferences(
    session: Session, channel_id: int, preferences: tuple[PreferenceUpdate, ...], customers: Customers
) -> None:
    changes = []
    for preference in preferences:
        phone = phone_of_wa_id(preference.customer.wa_id) if preference.customer.wa_id else None
        contact_id = customers.contact_of(phone_number=phone, user_id=preference.customer.user_id)
        assert contact_id is not None  # learn_customers saw every preference's customer
        changes.append((contact_id, preference.value is Preference.STOP, preference.timestamp))
    set_marketing_preferences(session, channel_id=channel_id, changes=changes)
