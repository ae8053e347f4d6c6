"""What callers read about sent messages: one message, the message list and its failure series (API.md
section 11 and the dashboard's message log), and an agent's failed reply for Retry. The sends themselves
are `messages.service`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from wagate.accounts.auth import Principal
from wagate.channels.service import channel_for_member, member_channels
from wagate.core.db import Database
from wagate.core.errors import Conflict, InvalidRequest, MessageNotFound
from wagate.core.phones import normalize_phone_number
from wagate.messages import repository
from wagate.messages.models import Direction, Message, MessageStatus, SentMessage
from wagate.messages.repository import SentFilter

# Published for the dashboard's conversation page: a conversation's last messages, oldest first.
from wagate.messages.repository import conversation_messages as conversation_messages
from wagate.templates.models import Template
from wagate.templates.service import APPROVED, list_templates


async def read_message(session: AsyncSession, *, principal: Principal, message_id: str) -> SentMessage:
    """A message sent through the API or a batch (404 for another account's or unknown, 403 when
    the caller is not a member of its inbox)."""
    found = await repository.sent_message(session, account_id=principal.account_id, message_id=message_id)
    if found is None:
        raise MessageNotFound()
    await channel_for_member(session, principal=principal, channel_id=found.message.channel_id)
    return found


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
    db: Database,
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
    async with db.read() as session:
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
    db: Database, *, principal: Principal, filters: MessageFilters, now: datetime | None = None
) -> FailureSeries:
    """The failures among the messages `list_messages` would list for `filters` (their status filter
    aside), counted per reason over time, in one grouped statement: from `created_after` (else 7 days
    before the end; at most 366 days before it) to `created_before` (else now), per hour up to 2 days,
    else per day."""
    end = _utc(filters.created_before) or _utc(now) or datetime.now(UTC)
    earliest = _earlier(end, CHART_MAX_SPAN)
    start = max(_utc(filters.created_after) or _earlier(end, CHART_DEFAULT_SPAN), earliest)
    hourly = end - start <= CHART_HOURLY_SPAN
    async with db.read() as session:
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


@dataclass(frozen=True)
class FailedReply:
    """What an agent's failed reply said, for Retry to send again as a new message."""

    text: str | None
    template: dict[str, Any] | None  # {"name", "language", "parameters"}, as the reply sent it


async def failed_reply(
    db: Database, *, principal: Principal, conversation_id: int, message_id: str
) -> FailedReply:
    """An agent's reply in the conversation that Meta (or the send) failed: Retry sends the same words
    again through `accept_send`, as a new message, checked like any reply (the window included).
    404 for any other message; 409 for a reply that did not fail (it went, or may still go)."""
    async with db.read() as session:
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


@dataclass(frozen=True)
class ReplyTemplates:
    """A channel's approved templates as a reply picks one: those the account used last first."""

    recent: list[Template]  # most recent first
    others: list[Template]  # the rest, by name and language


async def reply_templates(session: AsyncSession, *, account_id: int, channel_id: int) -> ReplyTemplates:
    approved = await list_templates(session, channel_ids=[channel_id], status=APPROVED)
    by_key = {(template.name, template.language): template for template in approved}
    recent_keys = await repository.recently_sent_templates(
        session, account_id=account_id, channel_id=channel_id
    )
    # A template sent before but no longer approved (paused, deleted) is not offered again.
    recent = [by_key[key] for key in recent_keys if key in by_key]
    chosen = {(template.name, template.language) for template in recent}
    return ReplyTemplates(recent, [t for t in approved if (t.name, t.language) not in chosen])
