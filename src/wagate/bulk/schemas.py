from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from wagate.bulk.models import Batch, BatchReport, BatchStatus, PreparedBatch
from wagate.core.db import isoformat
from wagate.http.limits import BodyId, RequestBody
from wagate.messages.schemas import VALIDITY_DESCRIPTION, StatusCallback, TemplateRef

MAX_RECIPIENTS = 1000


class BulkRecipient(BaseModel):
    model_config = ConfigDict(extra="forbid")

    phone_number: str | StrictInt
    parameters: list[Any] | dict[str, Any] | None = Field(
        None, description="This recipient's template parameters (default: `template.parameters`)."
    )


class SendBulkRequest(RequestBody):
    model_config = ConfigDict(extra="forbid")

    channel_id: BodyId
    template: TemplateRef
    # More than 1000 is refused by the service with `too_many_recipients`, not here.
    phone_numbers: list[str | StrictInt] | None = Field(None, min_length=1)
    recipients: list[BulkRecipient] | None = Field(None, min_length=1)
    conversation_status: Literal["open", "pending"] | None = None
    status_callback: StatusCallback | None = None
    validity_seconds: Annotated[
        int | None,
        Field(
            ge=1,
            le=86400,
            description=VALIDITY_DESCRIPTION
            + " For each recipient of the batch, counted from the batch's acceptance.",
        ),
    ] = None

    @model_validator(mode="after")
    def _numbers_or_recipients(self) -> SendBulkRequest:
        if (self.phone_numbers is None) == (self.recipients is None):
            raise ValueError("give exactly one of 'phone_numbers' and 'recipients'")
        return self

    def recipient_list(self) -> list[BulkRecipient]:
        if self.recipients is not None:
            return self.recipients
        return [BulkRecipient(phone_number=number) for number in self.phone_numbers or []]


class SendBulkResponse(BaseModel):
    batch_id: str
    status: Literal["processing", "completed"]
    total: int
    accepted: int
    rejected: int


def accepted_batch_view(batch: PreparedBatch) -> dict[str, Any]:
    """A bulk send's 202 body (API.md section 6)."""
    accepted = len(batch.sends)
    return {
        "batch_id": batch.batch_id,
        "status": (BatchStatus.processing if accepted else BatchStatus.completed).value,
        "total": len(batch.recipients),
        "accepted": accepted,
        "rejected": len(batch.recipients) - accepted,
    }


def template_view(batch: Batch) -> dict[str, Any]:
    """A batch's template, in the batch's views and in its `batch_completed` event."""
    return {
        "name": batch.template_name,
        "language": batch.template_language,
        "category": batch.template_category,
    }


def batch_view(report: BatchReport) -> dict[str, Any]:
    """API.md section 7."""
    batch = report.batch
    return {
        "batch_id": batch.id,
        "channel_id": batch.channel_id,
        "template": template_view(batch),
        "status": batch.status.value,
        "created_at": isoformat(batch.created_at),
        "completed_at": isoformat(batch.completed_at),
        "expires_at": isoformat(batch.expires_at),
        "total": batch.total,
        "accepted": batch.accepted,
        "rejected": batch.rejected,
        "counts": report.counts,
        "recipients": [
            {
                "phone_number": r.phone_number,
                "message_id": r.message_id,
                "status": r.status,
                "external_error": r.external_error,
            }
            for r in report.recipients
        ],
    }
