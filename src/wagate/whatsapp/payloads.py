"""Meta's Cloud API payloads as frozen, typed models, parsed once at the edge.

Parsing is strict about the shape we depend on (ids, statuses, timestamps) and lenient about
everything else: Meta adds fields and enum values over time, so unknown ones are ignored or become
``UNKNOWN`` rather than failing a whole webhook.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from wagate.whatsapp.template_events import TEMPLATE_FIELDS, QualityScore, TemplateChange, template_change

if TYPE_CHECKING:
    from wagate.whatsapp.standby import EchoMessage, Handover
    from wagate.whatsapp.system_messages import SystemMessage


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
        # Imported here: those modules build on this one's models.
        from wagate.whatsapp.standby import EchoMessage, Handover, standby_value
        from wagate.whatsapp.system_messages import SystemMessage

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


@dataclass(frozen=True, slots=True)
class SendResult:
    wamid: str
    wa_id: str | None = None
    message_status: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> SendResult:
        """Parse the 200 reply of ``POST /{phone_number_id}/messages``; ValueError when unusable."""
        if not isinstance(data, dict):
            raise ValueError("reply is not an object")
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict):
            raise ValueError("reply has no messages[0]")
        wamid = messages[0].get("id")
        if not isinstance(wamid, str) or not wamid:
            raise ValueError("reply has no messages[0].id")
        contacts = data.get("contacts")
        wa_id: str | None = None
        if isinstance(contacts, list) and contacts and isinstance(contacts[0], dict):
            raw = contacts[0].get("wa_id")
            wa_id = raw if isinstance(raw, str) else None
        status = messages[0].get("message_status")
        return cls(wamid=wamid, wa_id=wa_id, message_status=status if isinstance(status, str) else None)


@dataclass(frozen=True, slots=True)
class TemplateRecord:
    id: str
    name: str
    language: str
    status: str
    category: str
    parameter_format: str = "POSITIONAL"
    components: list[dict[str, Any]] = field(default_factory=list)
    # `quality_score.score` (GREEN, YELLOW, RED, UNKNOWN) and `rejected_reason` (NONE is none), when
    # the listing gives them: what the template webhooks say too (whatsapp/template_events.py).
    quality: str | None = None
    rejected_reason: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TemplateRecord:
        """One item of ``GET /{waba_id}/message_templates``; ValueError when name/language are missing."""
        name = data.get("name")
        language = data.get("language")
        if not isinstance(name, str) or not name or not isinstance(language, str) or not language:
            raise ValueError("template item needs name and language")
        components = data.get("components")
        fmt = data.get("parameter_format")
        return cls(
            id=str(data.get("id") or ""),
            name=name,
            language=language,
            status=str(data.get("status") or "UNKNOWN").upper(),
            category=str(data.get("category") or "UNKNOWN").upper(),
            parameter_format=fmt.upper() if isinstance(fmt, str) and fmt else "POSITIONAL",
            components=[c for c in components if isinstance(c, dict)] if isinstance(components, list) else [],
            quality=_listed_quality(data.get("quality_score")),
            rejected_reason=_listed_reason(data.get("rejected_reason")),
        )


def _listed_quality(value: Any) -> str | None:
    score = value.get("score") if isinstance(value, dict) else None
    return QualityScore(score).value if isinstance(score, str) and score else None


def _listed_reason(value: Any) -> str | None:
    return value if isinstance(value, str) and value and value.upper() != "NONE" else None


# --- builders for the send request ----------------------------------------------------------


def _base_message(to: str, biz_opaque_callback_data: str | None) -> dict[str, Any]:
    """`to` is a number (E.164 or digits) or a business-scoped user id: since 2026 Meta takes the
    latter as `recipient` in place of `to` (API.md section 13)."""
    message: dict[str, Any] = {"messaging_product": "whatsapp", "recipient_type": "individual"}
    if is_user_id(to):
        message["recipient"] = to
    else:
        # Meta wants the number with country code and no '+'.
        message["to"] = to.lstrip("+")
    if biz_opaque_callback_data is not None:
        message["biz_opaque_callback_data"] = biz_opaque_callback_data
    return message


def is_user_id(value: str) -> bool:
    """A business-scoped user id (`AZ.1349...`, `AZ.ENT.1181...`) rather than a phone number: only
    user ids have a dot."""
    return "." in value


def text_message(to: str, body: str, biz_opaque_callback_data: str | None = None) -> dict[str, Any]:
    message = _base_message(to, biz_opaque_callback_data)
    message["type"] = "text"
    message["text"] = {"body": body}
    return message


def template_message(
    to: str,
    name: str,
    language: str,
    components: list[dict[str, Any]] | None = None,
    biz_opaque_callback_data: str | None = None,
) -> dict[str, Any]:
    template: dict[str, Any] = {"name": name, "language": {"code": language}}
    if components:
        template["components"] = components
    message = _base_message(to, biz_opaque_callback_data)
    message["type"] = "template"
    message["template"] = template
    return message


def text_parameter(text: str, name: str | None = None) -> dict[str, Any]:
    """A text parameter; ``name`` is set for templates whose parameter_format is NAMED."""
    parameter: dict[str, Any] = {"type": "text", "text": text}
    if name is not None:
        parameter["parameter_name"] = name
    return parameter


def media_parameter(media_format: str, link: str, filename: str | None = None) -> dict[str, Any]:
    """A media header's parameter as Meta documents it: `{"type": "document", "document": {"link",
    "filename"}}` (`image` and `video` alike, without a filename)."""
    kind = media_format.lower()
    media: dict[str, Any] = {"link": link}
    if filename is not None:
        media["filename"] = filename
    return {"type": kind, kind: media}


def body_component(parameters: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "body", "parameters": parameters}


def header_component(parameters: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "header", "parameters": parameters}


def url_button_component(index: int, text: str) -> dict[str, Any]:
    """The dynamic suffix of a URL button (also how a copy-code/one-tap OTP button gets its code)."""
    return {"type": "button", "sub_type": "url", "index": str(index), "parameters": [text_parameter(text)]}


def authentication_components(code: str) -> list[dict[str, Any]]:
    """An AUTHENTICATION template carries the code twice: in the body and in its OTP button."""
    return [body_component([text_parameter(code)]), url_button_component(0, code)]
