"""A template's lifecycle as Meta's webhooks report it (API.md section 14): status, category, quality.

Each change names a template of a WhatsApp Business Account; it applies to that template on every
channel of the WABA (by Meta's template id, else by name and language), in the transaction of the
webhook, and writes `template_updated` for the account webhooks when a field the event names
actually changed (a repeated webhook changes nothing and fires nothing). Sends read templates from a
cache of a few seconds: the caller clears this process's once the transaction is committed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, select, update
from sqlalchemy.orm import Session

from wagate.channels.models import Channel
from wagate.core.db import utcnow
from wagate.events.models import DeliveryKind, EventKind
from wagate.events.publish import NewDelivery, subscribers, webhook_key_prefix, write_deliveries
from wagate.events.subscriptions import Subscriptions
from wagate.outbox.models import JobKind, OutboxJob
from wagate.templates.models import Template
from wagate.templates.schemas import TemplateOut
from wagate.templates.service import APPROVED
from wagate.templates.variables import template_variables
from wagate.whatsapp.template_events import (
    TemplateCategoryChange,
    TemplateChange,
    TemplateEvent,
    TemplateQualityChange,
    TemplateRef,
    TemplateStatusChange,
)
from wagate.whatsapp.webhook_body import OddItem

log = logging.getLogger(__name__)

# The fields of `template_updated`'s `changes`, in this order.
WATCHED = ("status", "category", "pending_category", "quality")
_REASON_LENGTH = 500  # Template.rejected_reason
_CATEGORY_LENGTH = 40  # Template.category, pending_category


@dataclass
class TemplatesApplied:
    """What a round of template changes did: template rows changed, events written, and the
    changes that could not be applied (kept as dead letters by the caller)."""

    changed: int = 0
    events: int = 0
    odd: list[OddItem] = field(default_factory=list)


def apply_template_changes(
    session: Session, changes: Sequence[TemplateChange], subscriptions: Subscriptions | None = None
) -> TemplatesApplied:
    """Apply Meta's template changes in order, and write their `template_updated` events."""
    applied = TemplatesApplied()
    if not changes:
        return applied
    wabas = {change.template.waba_id for change in changes}
    channels: dict[str, list[Channel]] = {}
    for channel in session.scalars(select(Channel).where(Channel.waba_id.in_(sorted(wabas)))):
        channels.setdefault(channel.waba_id, []).append(channel)
    updates: list[tuple[Template, dict[str, dict[str, Any]]]] = []
    unsynced: set[int] = set()
    for change in changes:
        ref = change.template
        if ref.waba_id not in channels:
            reason = f"no channel has WhatsApp Business Account {ref.waba_id}"
            applied.odd.append(OddItem(reason, _raw(change)))
            continue
        if isinstance(change, TemplateStatusChange) and change.event is TemplateEvent.UNKNOWN:
            # Something Meta added since: the status cannot be told from it, so it is kept for an
            # operator, and the periodic sync brings the template's status anyway.
            applied.odd.append(OddItem(f"template event {change.raw_event!r} is not known", _raw(change)))
            continue
        templates = _templates_of(session, [c.id for c in channels[ref.waba_id]], ref)
        if not templates:
            # A template created (or renamed) since the last sync: its status webhook comes before
            # the listing has it, so the listing is fetched now rather than within the hour.
            log.info("template %s of WABA %s is not synced yet: syncing", _name(ref), ref.waba_id)
            unsynced.update(c.id for c in channels[ref.waba_id])
            continue
        for template in templates:
            before = {name: getattr(template, name) for name in WATCHED}
            _apply(template, change)
            moved = {
                name: {"from": before[name], "to": getattr(template, name)}
                for name in WATCHED
                if getattr(template, name) != before[name]
            }
            if moved:
                updates.append((template, moved))
    _sync_soon(session, unsynced)
    session.flush()
    applied.changed = len({template.id for template, _ in updates})
    applied.events = _publish(session, updates, channels, subscriptions)
    return applied


def _templates_of(session: Session, channel_ids: list[int], ref: TemplateRef) -> list[Template]:
    """The WABA's template on each of its channels: by Meta's id, else by name and language."""
    in_channels = Template.channel_id.in_(channel_ids)
    if ref.template_id is not None:
        by_id = Template.meta_id == ref.template_id
        found = list(session.scalars(select(Template).where(in_channels, by_id)))
        if found:
            return found
    if ref.name is None or ref.language is None:
        return []
    by_name = and_(Template.name == ref.name, Template.language == ref.language)
    return list(session.scalars(select(Template).where(in_channels, by_name)))


def _apply(template: Template, change: TemplateChange) -> None:
    if isinstance(change, TemplateStatusChange):
        status = change.new_status
        if status is None:
            return  # flagged, locked, unlocked: the template goes on as it is
        template.status = status
        # Why it cannot be sent; an approval clears it (NONE reasons are none).
        reason = None if status == APPROVED else change.reason
        template.rejected_reason = reason[:_REASON_LENGTH] if reason else None
    elif isinstance(change, TemplateCategoryChange):
        if change.announced:
            pending = (change.correct_category or "")[:_CATEGORY_LENGTH]
            template.pending_category = pending if pending != template.category else None
            return
        category = (change.new_category or template.category)[:_CATEGORY_LENGTH]
        if category != template.category:
            template.category = category
            # An AUTHENTICATION template's code button is filled from the code: its variables differ.
            template.variables = template_variables(template.components, category)
        template.pending_category = None
    elif isinstance(change, TemplateQualityChange):
        template.quality = change.new_quality.value


def _sync_soon(session: Session, channel_ids: set[int]) -> None:
    """Make these channels' periodic template syncs due now (one under way already fetches)."""
    if not channel_ids:
        return
    now = utcnow()
    jobs = [
        job_id
        for job_id, payload in session.execute(
            select(OutboxJob.id, OutboxJob.payload).where(
                OutboxJob.kind == JobKind.sync_templates, OutboxJob.run_at > now
            )
        )
        if isinstance(payload, dict) and payload.get("channel_id") in channel_ids
    ]
    if jobs:
        session.execute(update(OutboxJob).where(OutboxJob.id.in_(jobs)).values(run_at=now))


def _publish(
    session: Session,
    updates: list[tuple[Template, dict[str, dict[str, Any]]]],
    channels: dict[str, list[Channel]],
    subscriptions: Subscriptions | None,
) -> int:
    """`template_updated` to the webhooks of each changed template's account, one per change, in order
    for each template (its own ordering key)."""
    if not updates:
        return 0
    account_of = {c.id: c.account_id for found in channels.values() for c in found}
    webhooks = subscribers(session, subscriptions, set(account_of.values()), EventKind.template_updated)
    deliveries = [
        NewDelivery(
            account_id=account_id,
            kind=DeliveryKind.template_updated,
            body={
                "event": EventKind.template_updated.value,
                "account_id": account_id,
                "template": TemplateOut.of(template).model_dump(mode="json"),
                "changes": moved,
            },
            message_id=None,
            ordering_key=f"{webhook_key_prefix(webhook_id)}template:{template.id}",
            webhook_id=webhook_id,
        )
        for template, moved in updates
        if (account_id := account_of[template.channel_id]) in webhooks
        for webhook_id in webhooks[account_id]
    ]
    return write_deliveries(session, deliveries)


def _name(ref: TemplateRef) -> str:
    return f"{ref.name or '?'} ({ref.language or '?'}, id {ref.template_id or '?'})"


def _raw(change: TemplateChange) -> dict[str, Any]:
    """What a dead letter keeps: the change as Meta sent it, with the WABA it came for."""
    return {"waba_id": change.template.waba_id, "change": change.raw}
