"""What the gateway sends to the Cloud API (message bodies and their template components), and what
the API answers (`SendResult`, `TemplateRecord`). Meta's webhooks are whatsapp/payloads.py and
whatsapp/webhook_body.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wagate.whatsapp.template_events import QualityScore


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
