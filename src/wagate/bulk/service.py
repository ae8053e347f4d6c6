"""Bulk sends: one template to up to 1000 numbers, stored whole in one transaction, sent as ordinary messages.

A batch is a `batches` row and one `batch_recipients` row per distinct recipient (its message, or why
it was rejected); every accepted recipient is an ordinary message with a bulk-priority outbox row, so the
channel's lane paces the batch and lets single sends go first. The batch is `completed` once no send of
it waits to be handed to Meta; that moment, recorded with the send outcomes, writes `batch_completed`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.accounts.auth import Principal
from wagate.bulk import repository
from wagate.bulk.models import Batch, BatchRecipient, BatchReport, PreparedBatch, RecipientState

# Published for the dispatcher's periodic purge: batches past their 7 days, a bounded bite at a time.
from wagate.bulk.repository import purge_expired_batches as purge_expired_batches
from wagate.bulk.schemas import MAX_RECIPIENTS, BulkRecipient, SendBulkRequest, accepted_batch_view
from wagate.channels.service import channel_for_caller, channel_for_member, member_channels
from wagate.conversations.service import numbers_in_window, stopped_marketing_of
from wagate.core.cache import Caches
from wagate.core.config import Settings
from wagate.core.db import utcnow
from wagate.core.errors import (
    BatchNotFound,
    Conflict,
    InvalidPhoneNumber,
    MarketingPreferenceStopped,
    RateLimited,
    TemplateParametersMismatch,
    TooManyRecipients,
)
from wagate.core.ids import new_id
from wagate.core.phones import normalize_phone_number
from wagate.core.prices import PriceEntry
from wagate.core.security import SecretBox
from wagate.events.subscriptions import current_subscriptions
from wagate.idempotency.service import AlreadyAnswered, IdempotentRequest, answered_before, remember_accepted
from wagate.messages.models import BoundTemplate, MessageStatus, PreparedSend
from wagate.messages.outbound import build_send
from wagate.messages.schemas import TemplateRef
from wagate.messages.service import check_media_link, checked_callback, store_sends
from wagate.observability.logs import note_request
from wagate.outbox.models import Priority
from wagate.runtime.gateway import Gateway
from wagate.templates.models import Template
from wagate.templates.service import cached_template, require_approved
from wagate.templates.variables import MEDIA_HEADER, MediaHeader, bind_parameters, header_format

REJECTED_INVALID_NUMBER = "invalid_phone_number"
REJECTED_MARKETING_STOPPED = MarketingPreferenceStopped.code
# A rejected number is kept as given, which may be anything up to the body limit: cut to the column.
_NUMBER_COLUMN_LENGTH: int = getattr(BatchRecipient.__table__.c.phone_number.type, "length", None) or 64


async def admit(caches: Caches, *, channel_id: int, rate: int, adding: int, settings: Settings) -> None:
    """429 `rate_limited` when the channel's waiting bulk sends and `adding` more would take longer
    than `bulk_backlog_max_seconds` at `rate`; Retry-After says when enough of them will have gone."""
    allowed = math.floor(settings.bulk_backlog_max_seconds * max(1, rate))
    if adding > allowed:  # no wait makes room for it: a channel this slow takes smaller batches
        raise RateLimited(
            f"This channel sends {rate} messages per second: at most {allowed} of a batch can wait at once.",
            headers={"Retry-After": str(math.ceil(settings.bulk_backlog_max_seconds))},
        )
    async with caches.db.read() as session:
        waiting = await repository.bulk_sends_waiting(
            session, channel_id=channel_id, up_to=allowed - adding + 1
        )
    if waiting + adding > allowed:
        retry_after = math.ceil((waiting + adding - allowed) / max(1, rate))
        raise RateLimited(
            f"This channel already has {waiting} bulk messages waiting; the batch would wait more than "
            f"{settings.bulk_backlog_max_seconds:g} s. Retry after {retry_after} s.",
            headers={"Retry-After": str(retry_after)},
        )


async def prepare_batch(
    caches: Caches,
    *,
    principal: Principal,
    request: SendBulkRequest,
    settings: Settings,
    secret_box: SecretBox,
) -> PreparedBatch:
    """Every check of API.md section 6 without writing anything; the template is checked once.
    Administrators only (403 `administrator_required`)."""
    principal.require_administrator()
    channel = await channel_for_caller(caches, principal, request.channel_id)
    given = request.recipient_list()
    field = "recipients" if request.recipients is not None else "phone_numbers"
    if len(given) > MAX_RECIPIENTS:
        raise TooManyRecipients(
            details=[{"field": field, "issue": f"{len(given)} given, at most {MAX_RECIPIENTS}"}]
        )
    ref = request.template
    template = require_approved(
        await cached_template(caches, channel.id, ref.name, ref.language),
        name=ref.name,
        language=ref.language,
    )

    batch_id = new_id("bat")
    callback = await checked_callback(
        request.status_callback, caches=caches, settings=settings, box=secret_box
    )
    subscriptions = await current_subscriptions(caches)
    # One entry of the price list for the whole batch: the price of the day it is accepted.
    price = settings.price_list.now()
    build = functools.partial(
        build_send,
        price=price,
        account_id=principal.account_id,
        channel_id=channel.id,
        text=None,
        conversation_status=request.conversation_status,
        status_callback=callback,
        settings=settings,
        subscriptions=subscriptions,
        priority=Priority.bulk,
        batch_id=batch_id,
        validity_seconds=request.validity_seconds,
    )
    # Tens of milliseconds of CPU for 1000 numbers: off the event loop, so that single sends accepted
    # meanwhile are not held up by it.
    recipients, sends, mismatches = await asyncio.to_thread(_bind_recipients, given, ref, template, build)
    if mismatches:
        raise TemplateParametersMismatch(
            f"Template '{ref.name}' takes {len(template.variables)} parameters; not every recipient's match.",
            details=mismatches[:50],
        )
    await _check_media_links(caches, given, sends)
    recipients, sends = await _apply_customer_state(
        caches, principal.account_id, channel.id, template, recipients, sends, price
    )
    rate = channel.messages_per_second
    await admit(caches, channel_id=channel.id, rate=rate, adding=len(sends), settings=settings)
    return PreparedBatch(
        batch_id,
        principal.account_id,
        channel.id,
        BoundTemplate(template, {}, ref.parameters),
        sends,
        recipients,
        subscriptions,
    )


async def _check_media_links(caches: Caches, given: list[BulkRecipient], sends: list[PreparedSend]) -> None:
    """Each distinct link of a media header checked once (a batch's recipients mostly share one host,
    which the guard resolves once): 422 naming the first recipient whose link is refused."""
    checked: set[str] = set()
    for send in sends:
        media = send.template.values.get(MEDIA_HEADER) if send.template is not None else None
        if not isinstance(media, MediaHeader) or media.link in checked:
            continue
        checked.add(media.link)
        index = next(
            (
                i
                for i, r in enumerate(given)
                if r.parameters is not None and _link_of(r.parameters) == media.link
            ),
            None,
        )
        field = "template.parameters.header" if index is None else f"recipients[{index}].parameters.header"
        await check_media_link(media.link, caches=caches, field=field)


def _link_of(parameters: list[Any] | dict[str, Any]) -> Any:
    header = parameters.get(MEDIA_HEADER) if isinstance(parameters, dict) else (parameters or [None])[0]
    return header.get("link") if isinstance(header, dict) else None


async def _apply_customer_state(
    caches: Caches,
    account_id: int,
    channel_id: int,
    template: Template,
    recipients: list[tuple[str, str | None, str | None]],
    sends: list[PreparedSend],
    price: PriceEntry,
) -> tuple[list[tuple[str, str | None, str | None]], list[PreparedSend]]:
    """What the customers' state changes (API.md section 13), one query for the whole batch: a
    MARKETING template skips those who stopped marketing messages (rejected), and a UTILITY template
    is free for those whose window is open while the price list's entry `price` says so."""
    category = template.category.upper()
    if not sends or category not in ("MARKETING", "UTILITY"):
        return recipients, sends
    if category == "UTILITY" and not price.utility_free_in_window:
        return recipients, sends
    numbers = [send.phone_number for send in sends if send.phone_number]
    async with caches.db.read() as session:
        if category == "MARKETING":
            stopped = await stopped_marketing_of(
                session, account_id=account_id, channel_id=channel_id, phone_numbers=numbers
            )
            if not stopped:
                return recipients, sends
            recipients = [
                (number, None, REJECTED_MARKETING_STOPPED)
                if number in stopped
                else (number, message_id, error)
                for number, message_id, error in recipients
            ]
            return recipients, [send for send in sends if send.phone_number not in stopped]
        open_now = await numbers_in_window(
            session, account_id=account_id, channel_id=channel_id, phone_numbers=numbers
        )
    return recipients, [
        dataclasses.replace(send, cost_micros=0) if send.phone_number in open_now else send for send in sends
    ]


def _bind_recipients(
    given: list[BulkRecipient], ref: TemplateRef, template: Template, build: Callable[..., PreparedSend]
) -> tuple[list[tuple[str, str | None, str | None]], list[PreparedSend], list[dict[str, str]]]:
    """Each recipient's number and parameters checked, and its send built: (recipients in request
    order, sends, parameter mismatches)."""
    recipients: list[tuple[str, str | None, str | None]] = []
    sends: list[PreparedSend] = []
    mismatches: list[dict[str, str]] = []
    seen: set[str] = set()
    for index, recipient in enumerate(given):
        try:
            number = normalize_phone_number(str(recipient.phone_number))
        except InvalidPhoneNumber:
            number = _as_given(recipient.phone_number)
            if number not in seen:
                seen.add(number)
                recipients.append((number, None, REJECTED_INVALID_NUMBER))
            continue
        if number in seen:
            continue  # a number given twice is sent once
        seen.add(number)
        parameters = recipient.parameters if recipient.parameters is not None else ref.parameters
        values = bind_parameters(template.variables, parameters, header_format(template.components))
        if isinstance(values, str):
            where = (
                f"recipients[{index}].parameters"
                if recipient.parameters is not None
                else "template.parameters"
            )
            mismatches.append({"field": where, "issue": values})
            continue
        send = build(phone_number=number, bound=BoundTemplate(template, values, parameters))
        sends.append(send)
        recipients.append((number, send.message_id, None))
    return recipients, sends, mismatches


def _as_given(phone_number: str | int) -> str:
    """An invalid number as the batch shows it: as given, cut to what its column holds."""
    given = str(phone_number)
    if len(given) <= _NUMBER_COLUMN_LENGTH:
        return given
    return given[: _NUMBER_COLUMN_LENGTH - 3] + "..."


async def accept_batch(
    gateway: Gateway,
    *,
    principal: Principal,
    request: SendBulkRequest,
    idem: IdempotentRequest | None,
    expected_sends: int | None = None,
) -> PreparedBatch:
    """Accept a bulk send (API.md section 6): every check, then the batch, its recipients and every
    message with its send job in one transaction, then the channel's lane. The API and the dashboard
    both send batches through this. Its 202 body (`schemas.accepted_batch_view`) is remembered with
    `idem` in that transaction.

    `expected_sends`: the number of messages a preview showed; when the checks now give another
    (a customer stopped marketing messages, the template was paused), 409 and nothing is stored."""
    batch = await prepare_batch(
        gateway.caches,
        principal=principal,
        request=request,
        settings=gateway.settings,
        secret_box=gateway.secret_box,
    )
    if expected_sends is not None and len(batch.sends) != expected_sends:
        raise Conflict(
            f"The batch changed since its preview: {len(batch.sends)} messages would go now, not"
            f" {expected_sends}. Preview it again.",
            details=[{"field": "recipients", "issue": "changed since the preview"}],
        )
    dispatcher = gateway.dispatcher
    note_request(batch_id=batch.batch_id, channel=batch.channel_id, messages=len(batch.sends))

    def unit(session: Session) -> AlreadyAnswered | None:
        if (repeat := answered_before(session, idem)) is not None:
            return repeat
        # One transaction: the batch, its recipients, and every message with its outbox row.
        repository.store_batch(session, batch)
        if batch.sends:
            store_sends(session, batch.sends, notify_others=not dispatcher.owns(batch.channel_id))
        remember_accepted(
            session,
            idem,
            202,
            accepted_batch_view(batch),
            ttl_seconds=gateway.settings.idempotency_ttl_seconds,
        )
        return None

    # A large unit: on PostgreSQL it commits beside the group commit, so single sends do not wait.
    if (repeat := await gateway.db.write(unit, large=True)) is not None:
        raise repeat  # nothing stored
    dispatcher.wake(batch.channel_id)
    dispatcher.wake_events()
    return batch


async def read_batch(
    session: AsyncSession, *, principal: Principal, batch_id: str, now: datetime | None = None
) -> BatchReport:
    """API.md section 7: the batch with counts and recipients as they are now; 403
    `administrator_required` for an agent (only administrators send or read batches), 404 once
    expired or of another account, 403 for a channel whose inbox the caller is not a member of."""
    principal.require_administrator()
    batch = await repository.live_batch(
        session, account_id=principal.account_id, batch_id=batch_id, now=now or utcnow()
    )
    if batch is None:
        raise BatchNotFound()
    await channel_for_member(session, principal=principal, channel_id=batch.channel_id)
    counts = {"pending": 0, **{status.value: 0 for status in MessageStatus}, "rejected": 0}
    recipients = []
    for number, message_id, error, status, external_error, is_waiting in await repository.recipient_rows(
        session, batch_id=batch.id
    ):
        if message_id is None:
            shown, external_error = "rejected", error
        elif is_waiting:
            shown = "pending"
        else:
            shown = MessageStatus(status).value
        counts[shown] += 1
        failed = shown in ("failed", "rejected")
        recipients.append(RecipientState(number, message_id, shown, external_error if failed else None))
    return BatchReport(batch, counts, recipients)


BATCHES_PAGE = 25


@dataclass(frozen=True)
class BatchSummary:
    batch: Batch
    counts: dict[str, int]  # pending, sent, delivered, read, failed (rejected: batch.rejected)


async def list_batches(
    gateway: Gateway, *, principal: Principal, before: str | None = None
) -> tuple[list[BatchSummary], str | None]:
    """The batches of the caller's inboxes, newest first, with their progress (two statements a page);
    and the id to pass as `before` for the next page. Administrators only, as `read_batch`."""
    principal.require_administrator()
    async with gateway.db.read() as session:
        channel_ids = [channel.id for channel in await member_channels(session, principal=principal)]
        batches = await repository.batches_page(
            session,
            account_id=principal.account_id,
            channel_ids=channel_ids,
            before=before,
            limit=BATCHES_PAGE + 1,
            now=utcnow(),
        )
        more = len(batches) > BATCHES_PAGE
        batches = batches[:BATCHES_PAGE]
        progress = await repository.batch_progress(session, batch_ids=[b.id for b in batches])
    summaries = [
        BatchSummary(
            b,
            {
                "pending": 0,
                **{s.value: 0 for s in MessageStatus},
                **progress.get(b.id, {}),
                "rejected": b.rejected,
            },
        )
        for b in batches
    ]
    return summaries, batches[-1].id if more else None
