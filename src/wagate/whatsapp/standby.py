"""Conversation Routing (Meta Business Agent, API.md section 14): what Meta sends while another
responder holds a customer's conversation, and when control changes.

- `standby` changes carry the conversation's customer messages, the agent's replies (message echoes)
  and their statuses in the `messages` value shape. Real traffic (2026) nests them one level down,
  `value.standby.{contacts, messages, message_echoes, statuses}`; Meta's reference shows them beside
  `metadata`: both are read (`standby_value`).
- An echo (`message_echoes[]`, as Meta documents them for `smb_message_echoes`): `from` is the
  business number, `to` the customer; the customer's user id, when Meta gives it, in `to_user_id` /
  `recipient_user_id` or in `contacts[]`.
- `messaging_handovers` has no `metadata`: the business number is `recipient.phone_number_id`, the
  customer `sender`; `type` is `control_passed` (delivered to the new owner) or `control_taken`
  (delivered to the previous owner), and the object it names gives the owners' roles.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from wagate.whatsapp.payloads import (
    CustomerRef,
    MalformedWebhook,
    _contact_for,
    _id_str,
    _optional_str,
    _require_str,
    parse_timestamp,
)


class Holder(StrEnum):
    """Who answers the customer: the app (the gateway's users, through the API or the dashboard) or
    Meta's AI agent."""

    APP = "app"
    AGENT = "meta_business_agent"


# Role names Meta gives the AI agent in handover notifications (`previous_owner_role`,
# `previous_owner_app_role`, ...); any other role is the business's app.
_AGENT_ROLES = frozenset({"ai_agent", "meta_business_agent", "business_ai", "meta_ai"})


def standby_value(value: dict[str, Any]) -> dict[str, Any]:
    """The items of a `standby` change, wherever Meta put them (see the module)."""
    nested = value.get("standby")
    return {**value, **nested} if isinstance(nested, dict) else value


@dataclass(frozen=True, slots=True)
class EchoMessage:
    """A message another sender on the number (Meta Business Agent) sent to a customer."""

    wamid: str
    timestamp: datetime
    type: str
    text: str | None
    customer: CustomerRef

    @classmethod
    def from_dict(cls, data: dict[str, Any], contacts: tuple[CustomerRef, ...] = ()) -> EchoMessage:
        to = _id_str(data, "to")
        user_id = _id_str(data, "to_user_id") or _id_str(data, "recipient_user_id")
        contact = _contact_for(contacts, to, user_id) or CustomerRef()
        to, user_id = to or contact.wa_id, user_id or contact.user_id
        if to is None and user_id is None:
            raise MalformedWebhook("message_echoes[] names no customer: no to, to_user_id or contact")
        kind = _optional_str(data, "type") or "unknown"
        content = data.get(kind)
        text = None
        if isinstance(content, dict):
            text = _optional_str(content, "body") or _optional_str(content, "caption")
        return cls(
            wamid=_require_str(data, "id", "message_echoes[]"),
            timestamp=parse_timestamp(data.get("timestamp"), "message_echoes[].timestamp"),
            type=kind,
            text=text,
            customer=CustomerRef(to, user_id, contact.parent_user_id, contact.name, contact.username),
        )


@dataclass(frozen=True, slots=True)
class Handover:
    """A change of who holds a customer's conversation."""

    kind: str  # control_passed, control_taken (others kept as Meta named them)
    holder: Holder  # who holds the conversation after it
    customer: CustomerRef
    timestamp: datetime | None = None

    @classmethod
    def from_value(cls, value: dict[str, Any]) -> Handover:
        sender = value.get("sender")
        sender = sender if isinstance(sender, dict) else {}
        wa_id = _id_str(sender, "phone_number") or _id_str(sender, "wa_id")
        user_id = _id_str(sender, "user_id")
        if wa_id is None and user_id is None:
            raise MalformedWebhook("messaging_handovers names no customer: no sender")
        kind = _optional_str(value, "type") or ""
        detail = value.get(kind)
        raw_time = value.get("timestamp")
        return cls(
            kind=kind,
            holder=_holder_after(kind, detail if isinstance(detail, dict) else {}),
            customer=CustomerRef(wa_id, user_id),
            timestamp=parse_timestamp(raw_time, "messaging_handovers.timestamp") if raw_time else None,
        )


def _holder_after(kind: str, detail: dict[str, Any]) -> Holder:
    """The roles when Meta names them; else the notification's kind: `control_passed` reaches the
    new owner and `control_taken` the previous one (Meta's messaging_handovers reference), and the
    app is the one receiving it."""
    for key, names_new_owner in (
        ("new_owner_role", True),
        ("new_owner_app_role", True),
        ("previous_owner_role", False),
        ("previous_owner_app_role", False),
    ):
        role = detail.get(key)
        if isinstance(role, str) and role:
            agent = role.lower() in _AGENT_ROLES
            return Holder.AGENT if agent == names_new_owner else Holder.APP
    if kind == "control_taken":
        return Holder.AGENT
    if kind == "control_passed":
        return Holder.APP
    raise MalformedWebhook(f"messaging_handovers type {kind!r} is not understood")
