"""Accepting a send: every check first, then message + conversation + outbox row in one transaction."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from wagate.accounts.auth import Principal
from wagate.channels.service import channel_for_caller
from wagate.conversations.service import Recipient, recipient_for, refuse_stopped_marketing, window_for
from wagate.core.cache import Caches
from wagate.core.config import Settings
from wagate.core.errors import (
    InvalidUrl,
    PhoneNumberRequired,
    TemplateParametersMismatch,
    WindowClosed,
)
from wagate.core.phones import normalize_phone_number
from wagate.core.security import SecretBox
from wagate.core.units import Mergeable
from wagate.events.subscriptions import current_subscriptions
from wagate.events.urls import PUBLIC_HOSTS, check_url
from wagate.idempotency.service import AlreadyAnswered, IdempotentRequest, answered_before, remember_accepted
from wagate.messages import repository
from wagate.messages.models import (
    AcceptedSend,
    BoundTemplate,
    PreparedSend,
    SendPreview,
)
from wagate.messages.outbound import build_send

# A send's rows, for another domain's unit of work (bulk stores a batch's sends with it).
from wagate.messages.repository import store_sends as store_sends
from wagate.messages.schemas import SendMessageRequest, StatusCallback, TemplateRef, accepted_view
from wagate.observability.logs import note_request
from wagate.outbox.models import ClaimedSend, FastClaim
from wagate.runtime.gateway import Gateway
from wagate.templates.render import message_template_text
from wagate.templates.service import cached_template, require_approved
from wagate.templates.variables import (
    AUTHENTICATION,
    MEDIA_HEADER,
    MediaHeader,
    bind_parameters,
    header_format,
)


async def bind_template(caches: Caches, *, channel_id: int, ref: TemplateRef, field: str) -> BoundTemplate:
    found = await cached_template(caches, channel_id, ref.name, ref.language)
    template = require_approved(found, name=ref.name, language=ref.language)
    values = bind_parameters(template.variables, ref.parameters, header_format(template.components))
    if isinstance(values, str):
        raise TemplateParametersMismatch(
            f"Template '{ref.name}' takes {len(template.variables)} parameters: {values}.",
            details=[{"field": f"{field}.parameters", "issue": values}],
        )
    media = values.get(MEDIA_HEADER)
    if isinstance(media, MediaHeader):
        await check_media_link(media.link, caches=caches, field=f"{field}.parameters.header")
    return BoundTemplate(template, values, ref.parameters)


async def check_media_link(link: str, *, caches: Caches, field: str) -> None:
    """422 `template_parameters_mismatch` naming the header unless a media header's link is an https
    URL to a public address: the guard of event URLs, always applied (WAGATE_ALLOW_PRIVATE_URLS does
    not lift it), since Meta fetches the file from the internet and a private address only shows what
    the deployment's own network holds (API.md section 14)."""
    try:
        await check_url(link, allow_private=False, field=field, public_hosts=caches[PUBLIC_HOSTS])
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
    caches: Caches,
    *,
    principal: Principal,
    request: SendMessageRequest,
    settings: Settings,
    secret_box: SecretBox,
) -> PreparedSend:
    """Run every check of API.md sections 4 and 13 (404, 403, then each 422) without writing anything."""
    channel = await channel_for_caller(caches, principal, request.channel_id)
    phone_number = (
        normalize_phone_number(str(request.phone_number)) if request.phone_number is not None else None
    )
    fallback = None
    if request.fallback_template is not None:
        # Checked even while the window is open: a broken fallback shows now, not on the day it is needed.
        fallback = await bind_template(
            caches, channel_id=channel.id, ref=request.fallback_template, field="fallback_template"
        )
    bound: BoundTemplate | None = None
    if request.template is not None:
        bound = await bind_template(caches, channel_id=channel.id, ref=request.template, field="template")
    category = _category(bound or fallback)
    # The entry of the price list in force now: the price of the day the message is accepted.
    price = settings.price_list.now()
    # A utility template is free inside the window only while the price list says so.
    needs_window = request.template is None or (category == "UTILITY" and price.utility_free_in_window)
    recipient = Recipient(phone_number)
    window_open = False
    if request.user_id is not None or needs_window or category == "MARKETING":
        async with caches.db.read() as session:
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
        request.status_callback, caches=caches, settings=settings, box=secret_box
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
        subscriptions=await current_subscriptions(caches),
        window_open=window_open,
        price=price,
        # Signed in to the dashboard rather than calling with a key: an agent's reply.
        agent_user_id=principal.user_id if principal.api_key_id is None else None,
        validity_seconds=request.validity_seconds,
    )


def _category(bound: BoundTemplate | None) -> str | None:
    return bound.template.category.upper() if bound is not None else None


async def checked_callback(
    callback: StatusCallback | None, *, caches: Caches, settings: Settings, box: SecretBox
) -> dict[str, Any] | None:
    """The status_callback as stored: its URL checked by the SSRF guard, its secret encrypted."""
    if callback is None:
        return None
    await check_url(
        callback.url,
        allow_private=settings.allow_private_urls,
        field="status_callback.url",
        public_hosts=caches[PUBLIC_HOSTS],
    )
    return _encrypt_callback(callback.model_dump(), box)


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
) -> AcceptedSend:
    """Accept one send (API.md section 4): every check, then the message and its send job in one
    transaction, then the dispatcher. The API and the dashboard both send through this. Its 201 body
    (`schemas.accepted_view`) is remembered with `idem` in the same transaction."""
    prepared = await prepare_send(
        gateway.caches,
        principal=principal,
        request=request,
        settings=gateway.settings,
        secret_box=gateway.secret_box,
    )
    accepted_send = AcceptedSend(prepared.message_id, prepared.sent_as)
    response = accepted_view(accepted_send)
    note_request(message_id=prepared.message_id, channel=prepared.channel_id)
    dispatcher, rooms = gateway.dispatcher, gateway.rooms
    # The fast path: when this process sends for the channel and its window has room (a batch under
    # way takes none of it), the row is stored already claimed and the call starts right after the
    # commit, without a claim of its own (wagate.outbox.fast_claims).
    claim = rooms.prepare_claim(prepared.channel_id)
    notify_others = not rooms.owns(prepared.channel_id)
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
    return accepted_send


async def preview_send(gateway: Gateway, *, principal: Principal, request: SendMessageRequest) -> SendPreview:
    """A dry run (API.md section 11): every check of a real send (`prepare_send`, the same 4xx), and
    what it would be: how it goes, the text the customer would read, the cost and the window. Nothing
    is stored, sent or evented, and no idempotency record is kept. `schemas.preview_view` renders it."""
    prepared = await prepare_send(
        gateway.caches,
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
    bound = prepared.template
    text = prepared.text or ""
    if bound is not None:
        template = bound.template
        text = message_template_text(template.components, template.variables, bound.parameters) or ""
    return SendPreview(prepared, text, window)
