"""Accepting a send: every check first, then message + conversation + outbox row in one transaction."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.accounts.auth import Principal
from wagate.api.deps import Gateway
from wagate.channels.service import channel_for_member, member_channels
from wagate.conversations.models import ConversationStatus
from wagate.conversations.repository import marketing_stopped
from wagate.conversations.service import Recipient, recipient_for, window_for
from wagate.core.config import Settings
from wagate.core.db import Mergeable, isoformat, utcnow
from wagate.core.errors import (
    Conflict,
    InvalidRequest,
    InvalidUrl,
    MarketingPreferenceStopped,
    MessageNotFound,
    PhoneNumberRequired,
    TemplateParametersMismatch,
    WindowClosed,
)
from wagate.core.ids import new_id
from wagate.core.phones import normalize_phone_number, whatsapp_digits
from wagate.core.prices import SESSION, PriceEntry
from wagate.core.security import SecretBox
from wagate.events.subscriptions import Subscriptions
from wagate.events.urls import check_url
from wagate.idempotency.service import AlreadyAnswered, IdempotentRequest, answered_before, remember_accepted
from wagate.messages import repository
from wagate.messages.models import (
    BoundTemplate,
    Direction,
    Message,
    MessageStatus,
    PreparedSend,
    SentAs,
    SentMessage,
)
from wagate.messages.repository import SentFilter
from wagate.messages.schemas import SendMessageRequest, StatusCallback, TemplateRef, format_amount
from wagate.observability.logs import current_request_id, note_request
from wagate.outbox.models import ClaimedSend, FastClaim, Priority
from wagate.runtime.lookups import Lookups
from wagate.templates.render import render_message_template
from wagate.templates.service import require_approved
from wagate.templates.variables import (
    MEDIA_HEADER,
    MediaHeader,
    bind_parameters,
    header_format,
    send_components,
)
from wagate.whatsapp.payloads import template_message, text_message


async def bind_template(lookups: Lookups, *, channel_id: int, ref: TemplateRef, field: str) -> BoundTemplate:
    found = await lookups.template(channel_id, ref.name, ref.language)
    template = require_approved(found, name=ref.name, language=ref.language)
    values = bind_parameters(template.variables, ref.parameters, header_format(template.components))
    if isinstance(values, str):
        raise TemplateParametersMismatch(
            f"Template '{ref.name}' takes {len(template.variables)} parameters: {values}.",
            details=[{"field": f"{field}.parameters", "issue": values}],
        )
    media = values.get(MEDIA_HEADER)
    if isinstance(media, MediaHeader):
        await check_media_link(media.link, lookups=lookups, field=f"{field}.parameters.header")
    return BoundTemplate(template, values, ref.parameters)


async def check_media_link(link: str, *, lookups: Lookups, field: str) -> None:
    """422 `template_parameters_mismatch` naming the header unless a media header's link is an https
    URL to a public address: the guard of event URLs, always applied (WAGATE_ALLOW_PRIVATE_URLS does
    not lift it), since Meta fetches the file from the internet and a private address only shows what
    the deployment's own network holds (API.md section 14)."""
    try:
        await check_url(link, allow_private=False, field=field, public_hosts=lookups.public_hosts)
    except InvalidUrl as exc:
        issue = exc.details[0]["issue"] if exc.details else "not a public https URL"
        raise TemplateParametersMismatch(
            f"The header's link must be an https URL to a public address: {issue}.",
            details=[{"field": field, "issue": issue}],
        ) from None


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
    """Run every check of API.md sections 4 and 13 (404, 403, then each 422) without writing anything."""
    channel = await lookups.channel(principal, request.channel_id)
    phone_number = (
        normalize_phone_number(str(request.phone_number)) if request.phone_number is not None else None
    )
    fallback = None
    if request.fallback_template is not None:
        # Checked even while the window is open: a broken fallback shows now, not on the day it is needed.
        fallback = await bind_template(
            lookups, channel_id=channel.id, ref=request.fallback_template, field="fallback_template"
        )
    bound: BoundTemplate | None = None
    if request.template is not None:
        bound = await bind_template(lookups, channel_id=channel.id, ref=request.template, field="template")
    category = _category(bound or fallback)
    # The entry of the price list in force now: the price of the day the message is accepted.
    price = settings.price_list.now()
    # A utility template is free inside the window only while the price list says so.
    needs_window = request.template is None or (category == "UTILITY" and price.utility_free_in_window)
    recipient = Recipient(phone_number)
    window_open = False
    if request.user_id is not None or needs_window or category == "MARKETING":
        async with lookups.db.read() as session:
            recipient = await recipient_for(
                session, account_id=principal.account_id, phone_number=phone_number, user_id=request.user_id
            )
            if needs_window:
                window = await window_for(
                    session, account_id=principal.account_id, channel_id=channel.id, recipient=recipient
                )
                window_open = window.open
            if request.template is None and not window_open:
                if fallback is None:
                    raise WindowClosed(details=[{"field": "text", "issue": "the 24-hour window is closed"}])
                bound = fallback
            if _category(bound) == "MARKETING":
                await refuse_stopped_marketing(session, principal.account_id, channel.id, recipient)
    if _category(bound) == AUTHENTICATION and recipient.phone_number is None:
        # Meta refuses an authentication template addressed by user id (error 131062): refused here,
        # before anything is stored, rather than failed after it was accepted.
        raise PhoneNumberRequired(
            details=[{"field": "user_id", "issue": "the customer's phone number is not known"}]
        )

    callback = await checked_callback(
        request.status_callback, lookups=lookups, settings=settings, box=secret_box
    )
    return build_send(
        account_id=principal.account_id,
        channel_id=channel.id,
        phone_number=recipient.phone_number,
        user_id=recipient.user_id,
        contact_id=recipient.contact_id,
        text=request.text,
        bound=bound,
        conversation_status=request.conversation_status,
        status_callback=callback,
        settings=settings,
        subscriptions=await lookups.subscriptions(),
        window_open=window_open,
        price=price,
        # Signed in to the dashboard rather than calling with a key: an agent's reply.
        agent_user_id=principal.user_id if principal.api_key_id is None else None,
        validity_seconds=request.validity_seconds,
    )


AUTHENTICATION = "AUTHENTICATION"


def _category(bound: BoundTemplate | None) -> str | None:
    return bound.template.category.upper() if bound is not None else None


async def refuse_stopped_marketing(
    session: AsyncSession, account_id: int, channel_id: int, recipient: Recipient
) -> None:
    """422 `marketing_preference_stopped` when the customer stopped marketing messages from the channel."""
    stopped = await marketing_stopped(
        session,
        account_id=account_id,
        channel_id=channel_id,
        phone_numbers=[recipient.phone_number] if recipient.phone_number else [],
        user_ids=[recipient.user_id] if recipient.user_id else [],
    )
    if stopped:
        field = "user_id" if recipient.user_id else "phone_number"
        raise MarketingPreferenceStopped(details=[{"field": field, "issue": "stopped marketing messages"}])


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
    phone_number: str | None,
    text: str | None,
    bound: BoundTemplate | None,
    conversation_status: str | None,
    status_callback: dict[str, Any] | None,
    settings: Settings,
    subscriptions: Subscriptions,
    priority: Priority = Priority.single,
    batch_id: str | None = None,
    user_id: str | None = None,
    contact_id: int | None = None,
    window_open: bool = False,
    price: PriceEntry | None = None,
    agent_user_id: int | None = None,
    validity_seconds: int | None = None,
) -> PreparedSend:
    """A checked send with its Cloud API body and price (a single message, or one of a batch). A send
    to a user id names it as Meta's `recipient`, even when its number is known. `price`: the entry of
    the price list in force (the one of now when not given); `window_open`: the customer's window,
    inside which the entry may make a utility template free."""
    message_id = new_id("msg")
    to = user_id or whatsapp_digits(phone_number or "")
    if bound is None:
        assert text is not None
        upstream_body = text_message(to, text, message_id)
    else:
        template = bound.template
        if phone_number is not None and template.category.upper() == AUTHENTICATION:
            to = whatsapp_digits(phone_number)  # Meta takes authentication templates by number only
        components = send_components(
            variables=template.variables,
            values=bound.values,
            category=template.category,
            parameter_format=template.parameter_format,
            media_format=header_format(template.components) if MEDIA_HEADER in bound.values else None,
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
        cost_micros=(price or settings.price_list.now()).send_micros(
            bound.template.category if bound else None, window_open=window_open
        ),
        currency=settings.currency,
        priority=priority,
        batch_id=batch_id,
        user_id=user_id,
        contact_id=contact_id,
        agent_user_id=agent_user_id,
        # Counted from the checked request: a deadline a moment early never sends a stale message.
        validity_seconds=validity_seconds,
        expires_at=utcnow() + timedelta(seconds=validity_seconds) if validity_seconds else None,
        request_id=current_request_id(),
    )


async def read_message(session: AsyncSession, *, principal: Principal, message_id: str) -> SentMessage:
    """A message sent through the API or a batch (404 for another account's or unknown, 403 when
    the caller is not a member of its inbox)."""
    found = await repository.sent_message(session, account_id=principal.account_id, message_id=message_id)
    if found is None:
        raise MessageNotFound()
    await channel_for_member(session, principal=principal, channel_id=found.message.channel_id)
    return found


@dataclass(frozen=True)
class _Accepted:
    """A single send checked and ready to store, with what its unit of work needs."""

    prepared: PreparedSend
    claim: FastClaim | None
    idem: IdempotentRequest | None
    response: dict[str, Any]
    idempotency_ttl_seconds: int
    notify_others: bool  # the same for all the sends of a key (see `accept_send`)


def _store_accepted(session: Session, sends: list[_Accepted]) -> list[int | AlreadyAnswered]:
    """The unit of work behind the 201s of single sends of one account, channel and conversation
    status that came in together: each request's key looked up, the new ones stored with one
    statement per table (`store_sends`), each response remembered under its key. A failure (a key
    another process answered meanwhile) fails them all, and the batch runs each alone again."""
    repeats = [answered_before(session, send.idem) for send in sends]
    new = [send for send, repeat in zip(sends, repeats, strict=True) if repeat is None]
    job_ids = iter(
        repository.store_sends(
            session,
            [send.prepared for send in new],
            notify_others=sends[0].notify_others,
            claims=[send.claim for send in new],
            ids=True,
        )
    )
    for send in new:
        remember_accepted(session, send.idem, 201, send.response, ttl_seconds=send.idempotency_ttl_seconds)
    return [next(job_ids) if repeat is None else repeat for repeat in repeats]


async def accept_send(
    gateway: Gateway, *, principal: Principal, request: SendMessageRequest, idem: IdempotentRequest | None
) -> dict[str, Any]:
    """Accept one send (API.md section 4): every check, then the message and its send job in one
    transaction, then the dispatcher. The API and the dashboard both send through this. Returns the
    201 body, remembered with `idem` in the same transaction."""
    prepared = await prepare_send(
        gateway.lookups,
        principal=principal,
        request=request,
        settings=gateway.settings,
        secret_box=gateway.secret_box,
    )
    response = {"id": prepared.message_id, "sent_as": prepared.sent_as.value, "status": "sent"}
    note_request(message_id=prepared.message_id, channel=prepared.channel_id)
    dispatcher = gateway.dispatcher
    # The fast path: when this process sends for the channel and its window has room (a batch under
    # way takes none of it), the row is stored already claimed and the call starts right after the
    # commit, without a claim of its own.
    claim = dispatcher.prepare_claim(prepared.channel_id)
    notify_others = not dispatcher.owns(prepared.channel_id)
    accepted = _Accepted(
        prepared, claim, idem, response, gateway.settings.idempotency_ttl_seconds, notify_others
    )
    # Single sends that share a batch share its statements too (see `_store_accepted`), when they
    # agree on what `store_sends` takes from the first of them: the account and channel, the
    # conversation's status, the subscriptions' snapshot and whether other processes are woken.
    key = (
        prepared.account_id,
        prepared.channel_id,
        prepared.conversation_status,
        id(prepared.subscriptions),
        notify_others,
    )
    job_id = await gateway.db.write(Mergeable(key, accepted, _store_accepted))
    if isinstance(job_id, AlreadyAnswered):
        raise job_id  # nothing stored, nothing to send (the slot `claim` held runs out with its second)
    if claim is not None:
        claim.started(
            ClaimedSend(
                job_id,
                prepared.message_id,
                prepared.upstream_body,
                1,
                prepared.priority,
                prepared.expires_at,
                prepared.validity_seconds,
                prepared.request_id,
            )
        )
        # The call to Meta is a task whose first step writes the request: let it run before this
        # request's 201 is written, so the message is on its way to Meta first (a customer waits for
        # the OTP; the caller only learns it was accepted). One turn of the event loop; measured in
        # docs/performance.md ("A message alone").
        await asyncio.sleep(0)
    else:
        dispatcher.wake(prepared.channel_id)
    if prepared.announced:
        dispatcher.wake_events()
    return response


LIST_LIMIT = 50
LIST_LIMIT_MAX = 200
# An id of ours (`msg_` + 26), a batch id (`bat_` + 26): longer text is no id at all.
ID_MAX_LENGTH = 40
TEMPLATE_NAME_MAX_LENGTH = 512
# The failure chart covers this much before its end when no start is given.
CHART_DEFAULT_SPAN = timedelta(days=7)
# Up to this span it counts per hour, beyond it per day; it covers at most the last CHART_MAX_SPAN.
CHART_HOURLY_SPAN = timedelta(days=2)
CHART_MAX_SPAN = timedelta(days=366)


@dataclass(frozen=True)
class MessageFilters:
    """The filters of the message list as a caller gives them (the API's query, the page's form);
    `list_messages` checks them (404 / 403 for the channel as for any use of it, 422 naming the field
    for a bad value). `created_after` is inclusive, `created_before` exclusive; a time without a zone
    is UTC. `template_name` and `error_code` (Meta's code at the start of `external_error`) are the
    dashboard's."""

    channel_id: int | None = None
    phone_number: str | None = None
    status: str | None = None
    batch_id: str | None = None
    template_name: str | None = None
    error_code: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


@dataclass(frozen=True)
class MessagePage:
    """Sent messages, newest first; `next_before` is the `before` of the next page (None: the last)."""

    messages: list[SentMessage]
    next_before: str | None


def _invalid(field: str, issue: str) -> InvalidRequest:
    return InvalidRequest(
        f"The request is not valid: {field}: {issue}.", details=[{"field": field, "issue": issue}]
    )


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


async def _sent_filter(session: AsyncSession, principal: Principal, filters: MessageFilters) -> SentFilter:
    """The filters checked, with the inboxes the caller may see (of one channel: 404 / 403)."""
    if filters.channel_id is not None:
        channel = await channel_for_member(session, principal=principal, channel_id=filters.channel_id)
        channel_ids = [channel.id]
    else:
        channel_ids = [channel.id for channel in await member_channels(session, principal=principal)]
    status = None
    if filters.status is not None:
        try:
            status = MessageStatus(filters.status)
        except ValueError:
            raise _invalid("status", "must be sent, delivered, read or failed") from None
    if filters.batch_id is not None and len(filters.batch_id) > ID_MAX_LENGTH:
        raise _invalid("batch_id", f"at most {ID_MAX_LENGTH} characters")
    template_name = filters.template_name.strip() if filters.template_name else None
    if template_name is not None and len(template_name) > TEMPLATE_NAME_MAX_LENGTH:
        raise _invalid("template_name", f"at most {TEMPLATE_NAME_MAX_LENGTH} characters")
    error_code = None
    if filters.error_code is not None:
        code = filters.error_code.strip()
        if not (code.isascii() and code.isdigit() and len(code) <= 9):
            raise _invalid("error_code", "must be Meta's numeric error code, like 131026")
        error_code = int(code)
    after, before = _utc(filters.created_after), _utc(filters.created_before)
    if after is not None and before is not None and after >= before:
        raise _invalid("created_before", "must be later than created_after")
    return SentFilter(
        channel_ids=channel_ids,
        phone_number=normalize_phone_number(filters.phone_number)
        if filters.phone_number is not None
        else None,
        status=status,
        batch_id=filters.batch_id,
        template_name=template_name or None,
        error_code=error_code,
        created_after=after,
        created_before=before,
    )


async def list_messages(
    gateway: Gateway,
    *,
    principal: Principal,
    filters: MessageFilters,
    before: str | None = None,
    limit: int = LIST_LIMIT,
) -> MessagePage:
    """The message list (API.md section 11, and the dashboard's /messages): messages sent through the
    API, in bulk and by agents (outbound) on the caller's inboxes, newest first by (created_at, id),
    `limit` (1..200) a page; `before` is a message id, the page after it (422 `before` when it is no
    sent message of the account). Three statements: the inboxes, the cursor, the page."""
    if not 1 <= limit <= LIST_LIMIT_MAX:
        raise _invalid("limit", f"must be from 1 to {LIST_LIMIT_MAX}")
    async with gateway.db.read() as session:
        found = await _sent_filter(session, principal, filters)
        cursor = None
        if before is not None:
            cursor = (
                await repository.sent_cursor(session, account_id=principal.account_id, message_id=before)
                if len(before) <= ID_MAX_LENGTH
                else None
            )
            if cursor is None:
                raise _invalid("before", "not the id of a message of this list")
        messages = await repository.list_sent_messages(
            session, account_id=principal.account_id, found=found, before=cursor, limit=limit + 1
        )
    more = len(messages) > limit
    messages = messages[:limit]
    return MessagePage(messages, messages[-1].message.id if more else None)


@dataclass(frozen=True)
class FailureSeries:
    """Failed sent messages per hour or day (UTC) and reason over [start, end): `buckets` labels every
    hour (`YYYY-MM-DD HH`) or day (`YYYY-MM-DD`) of the range, oldest first; `counts[reason][bucket]`
    (a reason is Meta's error code, like `131026`, or our own, like `expired`; `unknown` without one)."""

    start: datetime
    end: datetime
    hourly: bool
    buckets: list[str]
    counts: dict[str, dict[str, int]]

    @property
    def total(self) -> int:
        return sum(sum(per_bucket.values()) for per_bucket in self.counts.values())


async def failures_over_time(
    gateway: Gateway, *, principal: Principal, filters: MessageFilters, now: datetime | None = None
) -> FailureSeries:
    """The failures among the messages `list_messages` would list for `filters` (their status filter
    aside), counted per reason over time, in one grouped statement: from `created_after` (else 7 days
    before the end; at most 366 days before it) to `created_before` (else now), per hour up to 2 days,
    else per day."""
    end = _utc(filters.created_before) or _utc(now) or datetime.now(UTC)
    earliest = _earlier(end, CHART_MAX_SPAN)
    start = max(_utc(filters.created_after) or _earlier(end, CHART_DEFAULT_SPAN), earliest)
    hourly = end - start <= CHART_HOURLY_SPAN
    async with gateway.db.read() as session:
        found = await _sent_filter(session, principal, filters)
        ranged = replace(found, created_after=start, created_before=end)
        rows = await repository.failure_counts(
            session, account_id=principal.account_id, found=ranged, hourly=hourly
        )
    step, width = (timedelta(hours=1), 13) if hourly else (timedelta(days=1), 10)
    at = start.replace(minute=0, second=0, microsecond=0)
    if not hourly:
        at = at.replace(hour=0)
    buckets = []
    while at < end:
        buckets.append(at.replace(tzinfo=None).isoformat(sep=" ")[:width])  # as the database groups
        if at > datetime.max.replace(tzinfo=UTC) - 2 * step:  # near the year 9999
            break
        at += step
    counts: dict[str, dict[str, int]] = {}
    for bucket, reason, count in rows:
        per_bucket = counts.setdefault((reason or "").strip() or "unknown", {})
        per_bucket[bucket] = per_bucket.get(bucket, 0) + count
    return FailureSeries(start, end, hourly, buckets, counts)


def _earlier(at: datetime, span: timedelta) -> datetime:
    try:
        return at - span
    except OverflowError:  # near the year 1
        return datetime.min.replace(tzinfo=UTC)


async def preview_send(
    gateway: Gateway, *, principal: Principal, request: SendMessageRequest
) -> dict[str, Any]:
    """A dry run (API.md section 11): every check of a real send (`prepare_send`, the same 4xx), and
    what it would be: how it goes, the text the customer would read, the cost and the window. Nothing
    is stored, sent or evented, and no idempotency record is kept."""
    prepared = await prepare_send(
        gateway.lookups,
        principal=principal,
        request=request,
        settings=gateway.settings,
        secret_box=gateway.secret_box,
    )
    async with gateway.db.read() as session:
        recipient = await recipient_for(
            session,
            account_id=principal.account_id,
            phone_number=prepared.phone_number,
            user_id=prepared.user_id,
        )
        window = await window_for(
            session, account_id=principal.account_id, channel_id=prepared.channel_id, recipient=recipient
        )
    template = prepared.template
    preview = prepared.text or ""
    if template is not None:
        shown = render_message_template(
            template.template.components, template.template.variables, template.parameters
        )
        preview = (
            "\n".join(part for part in (shown.header, shown.body, shown.footer) if part) if shown else ""
        )
    category = template.template.category if template is not None else None
    return {
        "dry_run": True,
        "sent_as": prepared.sent_as.value,
        "preview": preview,
        "template": None
        if template is None
        else {
            "name": template.template.name,
            "language": template.template.language,
            "category": category,
            "parameters": template.parameters,
        },
        "cost": {
            "amount": format_amount(prepared.cost_micros),
            "currency": prepared.currency,
            "category": category or SESSION,
        },
        "window": {
            "channel_id": prepared.channel_id,
            "phone_number": prepared.phone_number,
            "user_id": prepared.user_id,
            "open": window.open,
            "last_customer_message_at": isoformat(window.last_customer_message_at),
            "expires_at": isoformat(window.expires_at),
            "seconds_remaining": window.seconds_remaining,
        },
    }


@dataclass(frozen=True)
class FailedReply:
    """What an agent's failed reply said, for Retry to send again as a new message."""

    text: str | None
    template: dict[str, Any] | None  # {"name", "language", "parameters"}, as the reply sent it


async def failed_reply(
    gateway: Gateway, *, principal: Principal, conversation_id: int, message_id: str
) -> FailedReply:
    """An agent's reply in the conversation that Meta (or the send) failed: Retry sends the same words
    again through `accept_send`, as a new message, checked like any reply (the window included).
    404 for any other message; 409 for a reply that did not fail (it went, or may still go)."""
    async with gateway.db.read() as session:
        message = await session.get(Message, message_id)
    if (
        message is None
        or message.account_id != principal.account_id
        or message.conversation_id != conversation_id
        or message.direction is not Direction.outbound
        or message.agent_user_id is None
    ):
        raise MessageNotFound("No reply of an agent with this id exists in this conversation.")
    if message.status is not MessageStatus.failed:
        raise Conflict("This reply did not fail: only a failed reply can be sent again.")
    template = (
        {
            "name": message.template_name,
            "language": message.template_language,
            "parameters": message.template_parameters,
        }
        if message.template_name
        else None
    )
    return FailedReply(None if template else message.text, template)
