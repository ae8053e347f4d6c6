"""A checked send built into what is stored and sent: its Cloud API body, recipient and price (a single
message, or one of a batch). Used by the send pipeline (`messages.service`) and by bulk sends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from wagate.conversations.models import ConversationStatus
from wagate.core.config import Settings
from wagate.core.db import utcnow
from wagate.core.ids import new_id
from wagate.core.phones import whatsapp_digits
from wagate.core.prices import PriceEntry
from wagate.events.subscriptions import Subscriptions
from wagate.messages.models import BoundTemplate, PreparedSend, SentAs
from wagate.observability.logs import current_request_id
from wagate.outbox.models import Priority
from wagate.templates.variables import AUTHENTICATION, MEDIA_HEADER, header_format, send_components
from wagate.whatsapp.outbound import template_message, text_message


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
