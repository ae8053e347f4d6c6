"""Meta's webhook bodies: status updates (one or many in a POST) and customer messages, 2026 shapes.

What each carries (docs/simulator.md, "Which Meta changes it follows", has the sources):

- statuses: ``value.contacts[]`` beside ``value.statuses[]``, one contact per recipient with
  ``wa_id`` (when the number is shown) and ``user_id``, and ``profile.username`` on ``delivered``
  and ``read`` when the customer has a username. Each status has ``recipient_id`` (the number, when
  shown) and ``recipient_user_id``. A ``failed`` status names the recipient only as the message was
  addressed: a send to a number has a contact with only ``wa_id`` and no ``recipient_user_id`` (a
  number without WhatsApp has no user id at all).
- customer messages: the contact always has ``user_id`` (``profile.name`` and ``profile.username``
  when known); the message has ``from_user_id``, and ``from`` / ``wa_id`` only when the number is
  shown, which it is not for a customer with a username.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from wagate.simulator.config import ChannelInfo
from wagate.simulator.customers import Customer

ERROR_HREF = "https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/"


@dataclass(frozen=True, slots=True)
class Recipient:
    """Who a sent message went to, and how it was addressed (``to`` or ``recipient``)."""

    customer: Customer
    by_user_id: bool = False  # sent with "recipient": "<BSUID>" instead of "to"

    @property
    def wa_id(self) -> str | None:
        """The number to show: always when the send named it, else only when Meta shows it."""
        customer = self.customer
        if not self.by_user_id:
            return customer.wa_id
        return customer.wa_id if customer.phone_visible else None


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """One status of one message, ready to be put into a webhook body with others."""

    channel: ChannelInfo
    item: dict[str, Any]
    contact: dict[str, Any] | None


def error_item(code: int, title: str, details: str) -> dict[str, Any]:
    return {
        "code": code,
        "title": title,
        "message": title,
        "error_data": {"details": details},
        "href": ERROR_HREF,
    }


def _value(channel: ChannelInfo, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "messaging_product": "whatsapp",
        "metadata": {
            "display_phone_number": channel.display_phone_number,
            "phone_number_id": channel.phone_number_id,
        },
        **body,
    }


def envelope(channel: ChannelInfo, value: dict[str, Any], field: str = "messages") -> dict[str, Any]:
    """One change of one channel; `field` is `standby` for a conversation Meta's AI agent holds."""
    change = {"value": _value(channel, value), "field": field}
    return {"object": "whatsapp_business_account", "entry": [{"id": channel.waba_id, "changes": [change]}]}


def status_contact(recipient: Recipient, status: str) -> dict[str, Any]:
    customer = recipient.customer
    if status == "failed":
        # Only the identifier the message was sent to (a number without WhatsApp has no user id).
        if recipient.by_user_id or customer.wa_id is None:
            return {"user_id": customer.user_id}
        return {"wa_id": customer.wa_id}
    contact: dict[str, Any] = {}
    if customer.username and status in ("delivered", "read"):
        contact["profile"] = {"username": customer.username}
    wa_id = recipient.wa_id
    if wa_id is not None:
        contact["wa_id"] = wa_id
    contact["user_id"] = customer.user_id
    return contact


def status_update(
    channel: ChannelInfo,
    recipient: Recipient,
    *,
    wamid: str,
    status: str,
    biz_opaque_callback_data: str | None = None,
    pricing_category: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    timestamp: int | None = None,
    billable: bool | None = None,
) -> StatusUpdate:
    """One status item with its contact. `billable`: whether Meta charges the message (the sender
    decides it by the pricing rules of the send's day, `SimulatorState.billable`); None: a template
    is charged and a session message (`service`) is not."""
    ts = int(time.time()) if timestamp is None else timestamp
    item: dict[str, Any] = {"id": wamid, "status": status, "timestamp": str(ts)}
    wa_id = recipient.wa_id
    if wa_id is not None:
        item["recipient_id"] = wa_id
    if status != "failed" or recipient.by_user_id or recipient.customer.wa_id is None:
        item["recipient_user_id"] = recipient.customer.user_id
    if biz_opaque_callback_data is not None:
        item["biz_opaque_callback_data"] = biz_opaque_callback_data
    if errors:
        item["errors"] = errors
    elif status in ("sent", "delivered") and pricing_category is not None:
        # Per-message pricing (PMP): `regular` when charged; `free_customer_service` for what Meta
        # did not charge inside the customer's window (until 2026-09-30).
        if billable is None:
            billable = pricing_category != "service"
        conversation_key = wa_id or recipient.customer.user_id
        item["conversation"] = {
            "id": _conversation_id(conversation_key, pricing_category),
            "origin": {"type": pricing_category},
        }
        if status == "sent":
            item["conversation"]["expiration_timestamp"] = str(ts + 24 * 3600)
        item["pricing"] = {
            "billable": billable,
            "pricing_model": "PMP",
            "type": "regular" if billable else "free_customer_service",
            "category": pricing_category,
        }
    return StatusUpdate(channel, item, status_contact(recipient, status))


def statuses_payload(updates: list[StatusUpdate]) -> dict[str, Any]:
    """One webhook body for statuses of one WABA: a change per channel, contacts in status order."""
    if not updates:
        raise ValueError("no statuses")
    changes: dict[str, tuple[ChannelInfo, list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for update in updates:
        channel = update.channel
        _, contacts, statuses = changes.setdefault(channel.phone_number_id, (channel, [], []))
        if update.contact is not None and update.contact not in contacts:
            contacts.append(update.contact)
        statuses.append(update.item)
    built = []
    for channel, contacts, statuses in changes.values():
        body: dict[str, Any] = {"contacts": contacts} if contacts else {}
        body["statuses"] = statuses
        built.append({"value": _value(channel, body), "field": "messages"})
    entry = {"id": updates[0].channel.waba_id, "changes": built}
    return {"object": "whatsapp_business_account", "entry": [entry]}


def status_payload(
    channel: ChannelInfo,
    recipient: Recipient,
    *,
    wamid: str,
    status: str,
    biz_opaque_callback_data: str | None = None,
    pricing_category: str | None = None,
    billable: bool | None = None,
    errors: list[dict[str, Any]] | None = None,
    timestamp: int | None = None,
) -> dict[str, Any]:
    """A webhook body with a single status."""
    update = status_update(
        channel,
        recipient,
        wamid=wamid,
        status=status,
        biz_opaque_callback_data=biz_opaque_callback_data,
        pricing_category=pricing_category,
        billable=billable,
        errors=errors,
        timestamp=timestamp,
    )
    return statuses_payload([update])


def inbound_payload(
    channel: ChannelInfo,
    customer: Customer,
    *,
    wamid: str,
    text: str,
    name: str | None,
    timestamp: int,
    field: str = "messages",
) -> dict[str, Any]:
    profile: dict[str, str] = {}
    if name:
        profile["name"] = name
    if customer.username:
        profile["username"] = customer.username
    contact: dict[str, Any] = {"profile": profile} if profile else {}
    message: dict[str, Any] = {}
    if customer.phone_visible:
        assert customer.wa_id is not None  # for mypy: phone_visible says so
        contact["wa_id"] = customer.wa_id
        message["from"] = customer.wa_id
    contact["user_id"] = customer.user_id
    message |= {
        "from_user_id": customer.user_id,
        "id": wamid,
        "timestamp": str(timestamp),
        "text": {"body": text},
        "type": "text",
    }
    return envelope(channel, {"contacts": [contact], "messages": [message]}, field)


def _conversation_id(recipient: str, category: str) -> str:
    return hashlib.sha256(f"{recipient}/{category}".encode()).hexdigest()[:32]
