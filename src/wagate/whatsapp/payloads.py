"""Meta's Cloud API payloads as frozen, typed models, parsed once at the edge: the items of a webhook
(statuses, customer messages, preferences, the customers they name). The body around them is
whatsapp/webhook_body.py; what the gateway sends and the API answers, whatsapp/outbound.py.

Parsing is strict about the shape we depend on (ids, statuses, timestamps) and lenient about
everything else: Meta adds fields and enum values over time, so unknown ones are ignored or become
``UNKNOWN`` rather than failing a whole webhook.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class MalformedWebhook(ValueError):
    """The body is not the shape Meta sends; the receiver answers 400."""


class StatusKind(StrEnum):
    SENT = "sent"
    DELIVERED = "delivered"
    READ = "read"
    FAILED = "failed"
    DELETED = "deleted"
    UNKNOWN = "unknown"

    @classmethod
    def _missing_(cls, value: object) -> StatusKind:
        # Meta introduces statuses (e.g. "played", "warning") without notice; keep the webhook usable.
        if isinstance(value, str):
            lowered = value.lower()
            for member in cls:
                if member.value == lowered:
                    return member
        return cls.UNKNOWN


def _require_str(data: dict[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value:
        raise MalformedWebhook(f"{where}.{key} must be a non-empty string")
    return value


def _optional_str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _require_dict(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedWebhook(f"{where} must be an object")
    return value


def _list_of_dicts(value: Any, where: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise MalformedWebhook(f"{where} must be a list of objects")
    return value


def parse_timestamp(value: Any, where: str = "timestamp") -> datetime:
    """Meta's timestamps are Unix seconds, usually as a string."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise MalformedWebhook(f"{where} must be Unix seconds")
    try:
        seconds = int(value)
    except ValueError:
        raise MalformedWebhook(f"{where} must be Unix seconds") from None
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        raise MalformedWebhook(f"{where} is out of range") from None


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    code: int
    title: str
    message: str | None = None
    details: str | None = None

    @property
    def external_error(self) -> str:
        return f"{self.code}: {self.title}"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ErrorInfo:
        raw_code = data.get("code")
        if isinstance(raw_code, bool) or not isinstance(raw_code, int | str):
            raise MalformedWebhook("errors[].code must be an integer")
        try:
            code = int(raw_code)
        except ValueError:
            raise MalformedWebhook("errors[].code must be an integer") from None
        message = _optional_str(data, "message")
        title = _optional_str(data, "title") or message or "Unknown error"
        error_data = data.get("error_data")
        details = _optional_str(error_data, "details") if isinstance(error_data, dict) else None
        return cls(code=code, title=title, message=message, details=details)


def _errors(value: Any, where: str) -> tuple[ErrorInfo, ...]:
    return tuple(ErrorInfo.from_dict(item) for item in _list_of_dicts(value, where))


@dataclass(frozen=True, slots=True)
class CustomerRef:
    """A customer as one webhook shows them (API.md section 13): the number (`wa_id`, hidden for
    customers with a username), the business-scoped user id and what their profile shows."""

    wa_id: str | None = None
    user_id: str | None = None
    parent_user_id: str | None = None
    name: str | None = None
    username: str | None = None

    @classmethod
    def from_contact(cls, data: dict[str, Any]) -> CustomerRef:
        profile = data.get("profile")
        profile = profile if isinstance(profile, dict) else {}
        return cls(
            wa_id=_id_str(data, "wa_id"),
            user_id=_id_str(data, "user_id"),
            parent_user_id=_id_str(data, "parent_user_id"),
            name=_optional_str(profile, "name") or None,
            username=_optional_str(profile, "username") or None,
        )


def _id_str(data: dict[str, Any], key: str) -> str | None:
    """An identifier Meta sends as a string (numbers sometimes as JSON numbers); empty is none."""
    value = data.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) and value else None


def _contact_for(
    contacts: tuple[CustomerRef, ...], wa_id: str | None, user_id: str | None
) -> CustomerRef | None:
    """The sibling contact an item is about: by number, then by user id, then the only one there is."""
    for contact in contacts:
        if (wa_id and contact.wa_id == wa_id) or (user_id and contact.user_id == user_id):
            return contact
    return contacts[0] if len(contacts) == 1 else None


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    id: str
    status: StatusKind
    timestamp: datetime
    recipient_id: str
    biz_opaque_callback_data: str | None = None
    errors: tuple[ErrorInfo, ...] = ()
    pricing_category: str | None = None
    # Meta's `pricing.billable`: False for what it does not charge (free_customer_service, ...).
    billable: bool | None = None
    raw_status: str = ""
    recipient_user_id: str | None = None
    # The status as Meta sent it: kept when it must wait for its message (parked statuses).
    payload: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any], contacts: tuple[CustomerRef, ...] = ()) -> StatusUpdate:
        """`contacts`: the change's contacts, where the recipient's user id may stand instead."""
        raw_status = _require_str(data, "status", "statuses[]")
        recipient_id = _id_str(data, "recipient_id") or ""
        user_id = _id_str(data, "recipient_user_id")
        if user_id is None and recipient_id:
            user_id = next((c.user_id for c in contacts if c.wa_id == recipient_id and c.user_id), None)
        pricing = data.get("pricing")
        category = _optional_str(pricing, "category") if isinstance(pricing, dict) else None
        billable = pricing.get("billable") if isinstance(pricing, dict) else None
        return cls(
            id=_require_str(data, "id", "statuses[]"),
            status=StatusKind(raw_status),
            timestamp=parse_timestamp(data.get("timestamp"), "statuses[].timestamp"),
            # Meta omits recipient_id for a customer whose number it hides; "" keeps the type simple.
            recipient_id=recipient_id,
            biz_opaque_callback_data=_optional_str(data, "biz_opaque_callback_data"),
            errors=_errors(data.get("errors"), "statuses[].errors"),
            pricing_category=category,
            billable=billable if isinstance(billable, bool) else None,
            raw_status=raw_status,
            recipient_user_id=user_id,
            payload=data,
        )


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A customer's message. `from_` (their number) is None for a customer with a username, who is
    known by `user_id` alone."""

    wamid: str
    from_: str | None
    timestamp: datetime
    type: str
    text: str | None = None
    user_id: str | None = None
    customer: CustomerRef = CustomerRef()
    # Came on the `standby` field: Meta's AI agent holds the conversation (API.md section 14).
    standby: bool = False

    @property
    def profile_name(self) -> str | None:
        return self.customer.name

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], contacts: tuple[CustomerRef, ...] = (), *, standby: bool = False
    ) -> InboundMessage:
        sender = _id_str(data, "from")
        contact = _contact_for(contacts, sender, _id_str(data, "from_user_id")) or CustomerRef()
        sender = sender or contact.wa_id
        user_id = _id_str(data, "from_user_id") or contact.user_id
        if sender is None and user_id is None:
            raise MalformedWebhook("messages[] names no customer: no from, from_user_id or contact user_id")
        text_obj = data.get("text")
        text = _optional_str(text_obj, "body") if isinstance(text_obj, dict) else None
        return cls(
            wamid=_require_str(data, "id", "messages[]"),
            from_=sender,
            timestamp=parse_timestamp(data.get("timestamp"), "messages[].timestamp"),
            type=_optional_str(data, "type") or "unknown",
            text=text,
            user_id=user_id,
            customer=CustomerRef(sender, user_id, contact.parent_user_id, contact.name, contact.username),
            standby=standby,
        )


class Preference(StrEnum):
    STOP = "stop"
    RESUME = "resume"


@dataclass(frozen=True, slots=True)
class PreferenceUpdate:
    """A customer's stop or resume of marketing messages (Meta's `user_preferences` webhook)."""

    customer: CustomerRef
    value: Preference
    timestamp: datetime

    @classmethod
    def from_dict(cls, data: dict[str, Any], contacts: tuple[CustomerRef, ...]) -> PreferenceUpdate | None:
        """None for a preference of another category than marketing messages (nothing to apply)."""
        if data.get("category") != "marketing_messages":
            return None
        wa_id, user_id = _id_str(data, "wa_id"), _id_str(data, "user_id")
        if wa_id is None and user_id is None:
            raise MalformedWebhook("user_preferences[] names no customer: no wa_id or user_id")
        raw = data.get("value")
        if raw not in ("stop", "resume"):
            raise MalformedWebhook("user_preferences[].value must be 'stop' or 'resume'")
        contact = _contact_for(contacts, wa_id, user_id) or CustomerRef()
        customer = CustomerRef(
            wa_id or contact.wa_id,
            user_id or contact.user_id,
            contact.parent_user_id,
            contact.name,
            contact.username,
        )
        return cls(
            customer, Preference(raw), parse_timestamp(data.get("timestamp"), "user_preferences[].timestamp")
        )
