from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

from wagate.conversations.models import HANDLED_BY_APP, USER_ID_LENGTH
from wagate.core.db import isoformat
from wagate.core.prices import SESSION
from wagate.http.limits import BodyId, RequestBody
from wagate.messages.models import AcceptedSend, Message, MessageRecord, SendPreview
from wagate.messages.pricing import message_cost_category

ParameterValue = str | int | float
# A country code, a dot, alphanumerics; enterprise ids have ENT between (API.md section 13).
USER_ID_PATTERN = r"^[A-Z]{2}\.(ENT\.)?[A-Za-z0-9]{1,58}$"


VALIDITY_DESCRIPTION = (
    "Validity period, 1 to 86400 seconds: a message not handed to WhatsApp within this many seconds"
    " of its acceptance (a backlog, a throttled or paused channel, an outage) is never sent; it"
    " becomes `failed` with `external_error` `expired: ...`, costs 0 and fires its events like any"
    " failure. Meant for OTPs. Without it a message waits as long as it takes."
)
ValiditySeconds = Annotated[int | None, Field(ge=1, le=86400, description=VALIDITY_DESCRIPTION)]


class TemplateRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=512)
    language: str = Field(min_length=1, max_length=20)
    parameters: list[Any] | dict[str, Any] | None = Field(
        None, description="Values in the order of the template's `variables`, or an object keyed by them."
    )


class StatusCallback(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=2000)
    after_seconds: StrictInt | None = Field(None, ge=1, le=86400)
    on_change: StrictBool | None = None
    secret: str | None = Field(None, min_length=1, max_length=500)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        # Only the scheme here; the rest of the URL is judged by the SSRF guard's check_url, which
        # answers 422 `invalid_url` for a URL that cannot be parsed or connected to.
        if value.partition(":")[0].lower() not in ("http", "https"):
            raise ValueError("must be an http or https URL")
        return value


class SendMessageRequest(RequestBody):
    model_config = ConfigDict(extra="forbid")

    channel_id: BodyId
    phone_number: str | StrictInt | None = Field(
        None, description="E.164 (+994501234567) or digits with the country code; or give `user_id`."
    )
    user_id: str | None = Field(
        None,
        max_length=USER_ID_LENGTH,
        pattern=USER_ID_PATTERN,
        description=(
            "Meta's business-scoped user id of the customer (e.g. AZ.13491208655302741918), instead of"
            " `phone_number`: for customers whose number is hidden behind a username."
        ),
    )
    template: TemplateRef | None = None
    text: str | None = Field(None, min_length=1, max_length=4096)
    fallback_template: TemplateRef | None = None
    conversation_status: Literal["open", "pending"] | None = None
    status_callback: StatusCallback | None = None
    validity_seconds: ValiditySeconds = None

    @model_validator(mode="after")
    def _template_or_text(self) -> SendMessageRequest:
        if (self.phone_number is None) == (self.user_id is None):
            raise ValueError("give exactly one of 'phone_number' and 'user_id'")
        if (self.template is None) == (self.text is None):
            raise ValueError("give exactly one of 'template' and 'text'")
        if self.fallback_template is not None and self.text is None:
            raise ValueError("'fallback_template' goes only with 'text'")
        return self


class SendMessageResponse(BaseModel):
    id: str
    sent_as: Literal["session", "template"]
    status: str


def accepted_view(accepted: AcceptedSend) -> dict[str, Any]:
    """A send's 201 body (API.md section 4)."""
    return {"id": accepted.message_id, "sent_as": accepted.sent_as.value, "status": "sent"}


def format_amount(micros: int) -> str:
    return format((Decimal(micros) / Decimal(1_000_000)).normalize(), "f")


def message_view(
    message: Message | MessageRecord, *, conversation_status: str, handled_by: str = HANDLED_BY_APP
) -> dict[str, Any]:
    """The message object of API.md section 5 (also the payload of every event about it);
    `handled_by`: who holds its conversation (API.md section 14)."""
    failed = message.status == "failed"
    view: dict[str, Any] = {
        "id": message.id,
        "channel_id": message.channel_id,
        "phone_number": message.phone_number,
        "user_id": message.user_id,
        "status": message.status.value,
        "sent_as": message.sent_as.value if message.sent_as else None,
        "template": None,
        "text": message.text,
        "conversation": {
            "id": message.conversation_id,
            "status": conversation_status,
            "handled_by": handled_by,
        },
        "cost": {
            "amount": format_amount(0 if failed else message.cost_micros),
            "currency": message.cost_currency,
            "category": message_cost_category(message),
        },
        "batch_id": message.batch_id,
        "upstream_message_id": message.upstream_message_id,
        # Meta's answer when it did not simply accept the send (held for a quality check under
        # template pacing, API.md section 14), until its first status webhook.
        "upstream_status": message.upstream_status,
        "status_history": message.status_history,
        "created_at": isoformat(message.created_at),
        "updated_at": isoformat(message.updated_at),
    }
    if failed:
        view["external_error"] = message.external_error
    if message.template_name is not None:
        view["template"] = {
            "name": message.template_name,
            "language": message.template_language,
            "category": message.template_category,
            "parameters": message.template_parameters,
        }
    return view


class MessageListOut(BaseModel):
    """The 200 body of `GET .../whatsapp/messages` (API.md section 11)."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "data": [
                    {
                        "id": "msg_01jdx3k6q8v2m4n5p6r7s8t9va",
                        "channel_id": 1,
                        "phone_number": "+994501234567",
                        "user_id": None,
                        "status": "failed",
                        "sent_as": "template",
                        "external_error": "131026: Message undeliverable",
                        "template": {
                            "name": "otp_code",
                            "language": "en",
                            "category": "AUTHENTICATION",
                            "parameters": ["123456"],
                        },
                        "text": None,
                        "conversation": {"id": 42, "status": "resolved", "handled_by": "app"},
                        "cost": {"amount": "0", "currency": "AZN", "category": "AUTHENTICATION"},
                        "batch_id": None,
                        "upstream_message_id": "wamid.HBgMOTk0NTAxMjM0NTY3FQIAERgSQ0",
                        "upstream_status": None,
                        "status_history": [
                            {"status": "sent", "at": "2026-11-25T09:30:00.120Z"},
                            {"status": "failed", "at": "2026-11-25T09:30:01.000Z"},
                        ],
                        "created_at": "2026-11-25T09:30:00.120Z",
                        "updated_at": "2026-11-25T09:30:01.004Z",
                    }
                ],
                "next_before": "msg_01jdx3k6q8v2m4n5p6r7s8t9va",
            }
        }
    )

    data: list[dict[str, Any]] = Field(
        description="Message objects (as `GET .../messages/{message_id}` returns them), newest first."
    )
    next_before: str | None = Field(
        description="Pass it as `before` for the next page; null on the last page."
    )


def preview_view(preview: SendPreview) -> dict[str, Any]:
    """The dry run's answer (API.md section 11)."""
    prepared, window = preview.prepared, preview.window
    template = prepared.template
    category = template.template.category if template is not None else None
    return {
        "dry_run": True,
        "sent_as": prepared.sent_as.value,
        "preview": preview.text,
        "template": None
        if template is None
        else {
            "name": template.template.name,
            "language": template.template.language,
            "category": category,
            "parameters": template.parameters,
        },
        "cost": {
            "amount": format_amount(prepared.cost_micros),
            "currency": prepared.currency,
            "category": category or SESSION,
        },
        "window": {
            "channel_id": prepared.channel_id,
            "phone_number": prepared.phone_number,
            "user_id": prepared.user_id,
            "open": window.open,
            "last_customer_message_at": isoformat(window.last_customer_message_at),
            "expires_at": isoformat(window.expires_at),
            "seconds_remaining": window.seconds_remaining,
        },
    }
