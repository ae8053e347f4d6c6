"""Applying Meta's webhooks: each batch of stored bodies parsed and applied in one transaction, the
statuses (messages/meta_statuses.py), customer messages (messages/customer_messages.py), Meta's AI
agent's echoes and handovers, template changes, and what cannot be applied kept as dead letters."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from wagate.channels.models import Channel
from wagate.conversations.customers import learn_customers
from wagate.events.subscriptions import Subscriptions
from wagate.messages.customer_messages import record_preferences, store_inbound
from wagate.messages.events import publish_status_changes
from wagate.messages.meta_statuses import apply_parked_statuses, apply_status_payloads
from wagate.messages.pricing import Prices
from wagate.messages.standby import apply_handovers, apply_system_messages, store_echoes
from wagate.outbox.dead_letters import bury
from wagate.templates.lifecycle import apply_template_changes
from wagate.whatsapp.payloads import CustomerRef, InboundMessage
from wagate.whatsapp.template_events import TemplateChange
from wagate.whatsapp.webhook_body import ChangeValue, OddItem, parse_webhook

log = logging.getLogger(__name__)

# The dead letters' kind of a webhook item that could not be applied (`wagate dead-letters` shows them).
ODD_WEBHOOK_ITEM = "meta_webhook_item"
# Every batch of Meta's webhooks runs it: built once, with its values bound at execution.
_CHANNELS_OF_NUMBERS = select(Channel).where(
    Channel.phone_number_id.in_(bindparam("numbers", expanding=True))
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
            record_preferences(session, channel.id, change.preferences, customers[channel.account_id])
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
