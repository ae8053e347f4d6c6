"""A webhook body of Meta's, parsed (`parse_webhook`): its changes for a phone number (`ChangeValue`:
statuses, customer messages, preferences, Conversation Routing), its template lifecycle changes, and
each item that could not be read (`OddItem`), kept for an operator while the rest is applied. The
items themselves are whatsapp/payloads.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wagate.whatsapp.payloads import (
    CustomerRef,
    ErrorInfo,
    InboundMessage,
    MalformedWebhook,
    PreferenceUpdate,
    StatusUpdate,
    _errors,
    _id_str,
    _optional_str,
    _require_dict,
    _require_str,
)
from wagate.whatsapp.standby import EchoMessage, Handover, standby_value
from wagate.whatsapp.system_messages import SystemMessage
from wagate.whatsapp.template_events import TEMPLATE_FIELDS, TemplateChange, template_change


@dataclass(frozen=True, slots=True)
class OddItem:
    """A part of a webhook that cannot be applied (a shape not understood): kept for an operator with
    the reason, while the rest of the body is applied."""

    reason: str
    item: Any
    phone_number_id: str | None = None


@dataclass(frozen=True, slots=True)
class ChangeValue:
    phone_number_id: str
    display_phone_number: str | None = None
    waba_id: str | None = None
    statuses: tuple[StatusUpdate, ...] = ()
    messages: tuple[InboundMessage, ...] = ()
    errors: tuple[ErrorInfo, ...] = ()
    contacts: tuple[CustomerRef, ...] = ()
    preferences: tuple[PreferenceUpdate, ...] = ()
    # The change's value as Meta sent it: what an operator sees when no channel has its number.
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # Conversation Routing (API.md section 14, whatsapp/standby.py): a `standby` change (Meta's AI
    # agent holds these conversations), the agent's replies, and control changes.
    standby: bool = False
    echoes: tuple[EchoMessage, ...] = ()
    handovers: tuple[Handover, ...] = ()
    # Notices about a customer among `messages[]` (whatsapp/system_messages.py), not their words.
    system_messages: tuple[SystemMessage, ...] = ()

    @classmethod
    def from_dict(
        cls,
        value: dict[str, Any],
        waba_id: str | None = None,
        *,
        odd: list[OddItem] | None = None,
        field: str = "messages",
    ) -> ChangeValue:
        """The change's items; each item that cannot be read goes to `odd` (or raises without it)."""
        raw, metadata = value, value.get("metadata")
        if field == "messaging_handovers" and metadata is None:
            metadata = value.get("recipient")  # handovers name the business number so, without metadata
        metadata = _require_dict(metadata, "value.metadata")
        number = _require_str(metadata, "phone_number_id", "value.metadata")
        standby = field == "standby"
        if standby:
            value = standby_value(value)

        def each(key: str, read: Any) -> list[Any]:
            items = value.get(key)
            if items is None:
                return []
            if not isinstance(items, list):
                return _odd_or_raise(odd, f"value.{key} must be a list", items, number)
            result = []
            for item in items:
                try:
                    parsed = read(_require_dict(item, f"{key}[]"))
                except MalformedWebhook as exc:
                    _odd_or_raise(odd, str(exc), item, number)
                    continue
                if parsed is not None:
                    result.append(parsed)
            return result

        # A contact that cannot be read is an odd item of its own: the statuses beside it still apply.
        contacts = tuple(each("contacts", CustomerRef.from_contact))
        messages = each(
            "messages",
            lambda m: (
                SystemMessage.from_dict(m)
                if m.get("type") == "system"
                else InboundMessage.from_dict(m, contacts, standby=standby)
            ),
        )
        handovers = []
        if field == "messaging_handovers":
            try:
                handovers.append(Handover.from_value(value))
            except MalformedWebhook as exc:
                _odd_or_raise(odd, str(exc), raw, number)

        return cls(
            phone_number_id=number,
            display_phone_number=_optional_str(metadata, "display_phone_number"),
            waba_id=waba_id,
            statuses=tuple(each("statuses", lambda item: StatusUpdate.from_dict(item, contacts))),
            messages=tuple(m for m in messages if isinstance(m, InboundMessage)),
            errors=_errors(value.get("errors"), "value.errors")
            if isinstance(value.get("errors"), list)
            else (),
            contacts=contacts,
            preferences=tuple(each("user_preferences", lambda p: PreferenceUpdate.from_dict(p, contacts))),
            raw=raw,
            standby=standby,
            echoes=tuple(each("message_echoes", lambda e: EchoMessage.from_dict(e, contacts))),
            handovers=tuple(handovers),
            system_messages=tuple(m for m in messages if isinstance(m, SystemMessage)),
        )


def _odd_or_raise(odd: list[OddItem] | None, reason: str, item: Any, number: str | None) -> list[Any]:
    if odd is None:
        raise MalformedWebhook(reason)
    odd.append(OddItem(reason, item, number))
    return []


# The fields whose changes carry something for a phone number; the template lifecycle's are about a
# WABA (TEMPLATE_FIELDS, parsed apart); others (account alerts...) are skipped.
APPLIED_FIELDS = ("messages", "user_preferences", "standby", "messaging_handovers")


@dataclass(frozen=True, slots=True)
class Webhook:
    changes: tuple[ChangeValue, ...]
    odd: tuple[OddItem, ...] = ()
    # Template lifecycle changes (whatsapp/template_events.py): about a WABA, not a phone number.
    templates: tuple[TemplateChange, ...] = ()


def check_envelope(body: Any) -> None:
    """Raise MalformedWebhook for a body that is no Meta webhook at all: not an object, no `entry` list."""
    if not isinstance(body, dict):
        raise MalformedWebhook("body must be an object")
    if not isinstance(body.get("entry"), list):
        raise MalformedWebhook("body.entry must be a list")


def phone_number_ids(body: dict[str, Any]) -> set[str]:
    """The business phone numbers a webhook body is about (`entry[].changes[].value.metadata`), read
    without judging the rest: what is odd is kept for an operator when the body is applied."""
    found: set[str] = set()
    for entry in body.get("entry") or ():
        changes = entry.get("changes") if isinstance(entry, dict) else None
        for change in changes if isinstance(changes, list) else ():
            value = change.get("value") if isinstance(change, dict) else None
            metadata = value.get("metadata") if isinstance(value, dict) else None
            if metadata is None and isinstance(value, dict):
                metadata = value.get("recipient")  # a handover's business number (no metadata)
            number = metadata.get("phone_number_id") if isinstance(metadata, dict) else None
            if isinstance(number, str | int):
                found.add(str(number))
    return found


def parse_webhook(body: Any) -> Webhook:
    """Every change of the fields the gateway applies, in order, and every item that could not be read.

    Only a body that is no Meta webhook at all (not an object, no `entry` list) raises
    MalformedWebhook: one unexpected item must not cost the rest of the body (API.md section 13)."""
    check_envelope(body)
    entries = body["entry"]
    changes: list[ChangeValue] = []
    odd: list[OddItem] = []
    templates: list[TemplateChange] = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("changes"), list):
            odd.append(OddItem("entry[] must be an object with a list of changes", entry))
            continue
        waba_id = _id_str(entry, "id")
        for change in entry["changes"]:
            if not isinstance(change, dict):
                odd.append(OddItem("entry[].changes[] must be an object", change))
                continue
            if change.get("field") in TEMPLATE_FIELDS:
                try:
                    templates.append(template_change(change, waba_id))
                except ValueError as exc:
                    odd.append(OddItem(str(exc), change))
                continue
            if change.get("field", "messages") not in APPLIED_FIELDS:
                continue
            try:
                value = _require_dict(change.get("value"), "changes[].value")
                name = change.get("field", "messages")
                changes.append(ChangeValue.from_dict(value, waba_id, odd=odd, field=name))
            except MalformedWebhook as exc:
                odd.append(OddItem(str(exc), change))
    return Webhook(tuple(changes), tuple(odd), tuple(templates))
