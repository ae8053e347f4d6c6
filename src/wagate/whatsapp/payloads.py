"""Meta's Cloud API payloads as frozen, typed models, parsed once at the edge.

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
class StatusUpdate:
    id: str
    status: StatusKind
    timestamp: datetime
    recipient_id: str
    biz_opaque_callback_data: str | None = None
    errors: tuple[ErrorInfo, ...] = ()
    pricing_category: str | None = None
    raw_status: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StatusUpdate:
        raw_status = _require_str(data, "status", "statuses[]")
        pricing = data.get("pricing")
        category = _optional_str(pricing, "category") if isinstance(pricing, dict) else None
        return cls(
            id=_require_str(data, "id", "statuses[]"),
            status=StatusKind(raw_status),
            timestamp=parse_timestamp(data.get("timestamp"), "statuses[].timestamp"),
            # Meta omits recipient_id on some group/edge statuses; an empty string keeps the type simple.
            recipient_id=_optional_str(data, "recipient_id") or "",
            biz_opaque_callback_data=_optional_str(data, "biz_opaque_callback_data"),
            errors=_errors(data.get("errors"), "statuses[].errors"),
            pricing_category=category,
            raw_status=raw_status,
        )


@dataclass(frozen=True, slots=True)
class InboundMessage:
    wamid: str
    from_: str
    timestamp: datetime
    type: str
    text: str | None = None
    profile_name: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], contacts: list[dict[str, Any]] | None = None) -> InboundMessage:
        sender = _require_str(data, "from", "messages[]")
        text_obj = data.get("text")
        text = _optional_str(text_obj, "body") if isinstance(text_obj, dict) else None
        return cls(
            wamid=_require_str(data, "id", "messages[]"),
            from_=sender,
            timestamp=parse_timestamp(data.get("timestamp"), "messages[].timestamp"),
            type=_optional_str(data, "type") or "unknown",
            text=text,
            profile_name=_profile_name(sender, contacts or []),
        )


def _profile_name(wa_id: str, contacts: list[dict[str, Any]]) -> str | None:
    # contacts[] is a sibling of messages[]; match on wa_id, falling back to the only contact present.
    chosen: dict[str, Any] | None = None
    for contact in contacts:
        if contact.get("wa_id") == wa_id:
            chosen = contact
            break
    if chosen is None and len(contacts) == 1:
        chosen = contacts[0]
    if chosen is None:
        return None
    profile = chosen.get("profile")
    return (_optional_str(profile, "name") or None) if isinstance(profile, dict) else None


@dataclass(frozen=True, slots=True)
class ChangeValue:
    phone_number_id: str
    display_phone_number: str | None = None
    waba_id: str | None = None
    statuses: tuple[StatusUpdate, ...] = ()
    messages: tuple[InboundMessage, ...] = ()
    errors: tuple[ErrorInfo, ...] = ()

    @classmethod
    def from_dict(cls, value: dict[str, Any], waba_id: str | None = None) -> ChangeValue:
        metadata = _require_dict(value.get("metadata"), "value.metadata")
        contacts = _list_of_dicts(value.get("contacts"), "value.contacts")
        return cls(
            phone_number_id=_require_str(metadata, "phone_number_id", "value.metadata"),
            display_phone_number=_optional_str(metadata, "display_phone_number"),
            waba_id=waba_id,
            statuses=tuple(
                StatusUpdate.from_dict(s) for s in _list_of_dicts(value.get("statuses"), "value.statuses")
            ),
            messages=tuple(
                InboundMessage.from_dict(m, contacts)
                for m in _list_of_dicts(value.get("messages"), "value.messages")
            ),
            errors=_errors(value.get("errors"), "value.errors"),
        )


def parse_webhook(body: Any) -> list[ChangeValue]:
    """Every ``messages`` change in a webhook body, in order.

    Changes of other fields (template status updates, account alerts) are skipped: they carry no
    phone number and nothing for the message pipeline.
    """
    root = _require_dict(body, "body")
    entries = root.get("entry")
    if not isinstance(entries, list):
        raise MalformedWebhook("body.entry must be a list")
    result: list[ChangeValue] = []
    for entry in _list_of_dicts(entries, "body.entry"):
        changes = entry.get("changes")
        if not isinstance(changes, list):
            raise MalformedWebhook("entry[].changes must be a list")
        waba_id = entry.get("id")
        for change in _list_of_dicts(changes, "entry[].changes"):
            if change.get("field", "messages") != "messages":
                continue
            value = _require_dict(change.get("value"), "changes[].value")
            result.append(ChangeValue.from_dict(value, str(waba_id) if waba_id is not None else None))
    return result


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
        )


# --- builders for the send request ----------------------------------------------------------


def _base_message(to_digits: str, biz_opaque_callback_data: str | None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        # Meta wants the number with country code and no '+'.
        "to": to_digits.lstrip("+"),
    }
    if biz_opaque_callback_data is not None:
        message["biz_opaque_callback_data"] = biz_opaque_callback_data
    return message


def text_message(to_digits: str, body: str, biz_opaque_callback_data: str | None = None) -> dict[str, Any]:
    message = _base_message(to_digits, biz_opaque_callback_data)
    message["type"] = "text"
    message["text"] = {"body": body}
    return message


def template_message(
    to_digits: str,
    name: str,
    language: str,
    components: list[dict[str, Any]] | None = None,
    biz_opaque_callback_data: str | None = None,
) -> dict[str, Any]:
    template: dict[str, Any] = {"name": name, "language": {"code": language}}
    if components:
        template["components"] = components
    message = _base_message(to_digits, biz_opaque_callback_data)
    message["type"] = "template"
    message["template"] = template
    return message


def text_parameter(text: str, name: str | None = None) -> dict[str, Any]:
    """A text parameter; ``name`` is set for templates whose parameter_format is NAMED."""
    parameter: dict[str, Any] = {"type": "text", "text": text}
    if name is not None:
        parameter["parameter_name"] = name
    return parameter


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
