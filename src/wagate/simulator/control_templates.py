"""``/_sim/`` endpoints that change a template as Meta does, and tell the gateway as Meta does.

Each changes the template in the WABA's listing (what ``GET /{waba_id}/message_templates`` returns
from then on) and posts the matching signed webhook, on the WABA's subscription: ``entry[].id`` is
the WABA id and the change has no ``metadata`` (Meta's webhooks reference, docs/simulator.md):

- ``POST /_sim/templates/{waba_id}/status`` ``{name, language, status, reason?, description?}``:
  ``message_template_status_update`` with ``event`` = the status (APPROVED, REJECTED, PAUSED,
  DISABLED, ARCHIVED, ...). ``reason`` is Meta's enumerated reason (INCORRECT_CATEGORY, ...; NONE by
  default); a pause carries ``other_info`` (``title`` FIRST_PAUSE, ``description`` the given words or
  Meta's usual ones), a disablement ``disable_info``. A rejection's reason shows as the listing's
  ``rejected_reason``. Sends with a PAUSED or DISABLED template are refused (132015, 132016).
- ``POST /_sim/templates/{waba_id}/category`` ``{name, language, category, announce?}``:
  ``template_category_update``. ``announce: true`` is Meta's notice a day ahead (``correct_category``,
  ``new_category`` = the current one, ``category_update_timestamp``) and changes nothing yet;
  otherwise the change is made (``previous_category``, ``new_category``) and later sends are priced by
  the new category in their statuses' ``pricing``.
- ``POST /_sim/templates/{waba_id}/quality`` ``{name, language, quality}``:
  ``message_template_quality_update`` (``previous_quality_score``, ``new_quality_score``); the
  listing's ``quality_score`` becomes ``{score, date}``.

Each answers ``{template, delivered}``: the template as listed now, and whether the gateway took the
webhook at the first attempt (a failed one is retried in the background, as Meta retries).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from wagate.simulator.state import SimulatorState
from wagate.simulator.webhooks import WebhookSender

# The statuses Meta's `event` names that are a template's status too (FLAGGED, LOCKED... are not).
Status = Literal[
    "APPROVED", "REJECTED", "PAUSED", "DISABLED", "ARCHIVED", "PENDING", "PENDING_DELETION", "IN_APPEAL"
]
Category = Literal["AUTHENTICATION", "MARKETING", "UTILITY"]
Quality = Literal["GREEN", "YELLOW", "RED", "UNKNOWN"]
# Meta's words for a first pause (template pausing: 3 hours, then 6, then disabled).
PAUSE_DESCRIPTION = "Your WhatsApp message template has been paused for 3 hours because it had issues."


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    language: str = Field(min_length=1)


class StatusChange(_Body):
    status: Status
    reason: str = Field(default="NONE", min_length=1, max_length=100)
    description: str | None = Field(default=None, min_length=1, max_length=500)


class CategoryChange(_Body):
    category: Category
    announce: bool = False


class QualityChange(_Body):
    quality: Quality


def template_webhook(
    waba_id: str, field: str, template: dict[str, Any], value: dict[str, Any]
) -> dict[str, Any]:
    """A WABA-level change as Meta posts it: no `messaging_product`, no `metadata`; the template's id
    as a JSON number, as Meta's reference shows it."""
    raw_id = str(template["id"])
    named = {
        "message_template_id": int(raw_id) if raw_id.isdigit() else raw_id,
        "message_template_name": template["name"],
        "message_template_language": template["language"],
    }
    change = {"value": {**named, **value}, "field": field}
    entry = {"id": waba_id, "time": int(time.time()), "changes": [change]}
    return {"object": "whatsapp_business_account", "entry": [entry]}


def build_template_router(state: SimulatorState, sender: WebhookSender) -> APIRouter:
    router = APIRouter(prefix="/_sim/templates/{waba_id}")

    def find(waba_id: str, body: _Body) -> dict[str, Any]:
        for template in state.templates_for(waba_id):
            if template.get("name") == body.name and template.get("language") == body.language:
                return template
        raise HTTPException(404, f"WABA {waba_id} has no template {body.name} ({body.language})")

    async def post(
        waba_id: str, field: str, template: dict[str, Any], value: dict[str, Any]
    ) -> dict[str, Any]:
        delivered = await sender.deliver_now(template_webhook(waba_id, field, template, value))
        return {"template": template, "delivered": delivered}

    @router.post("/status")
    async def change_status(waba_id: str, body: StatusChange) -> dict[str, Any]:
        template = find(waba_id, body)
        template["status"] = body.status
        if body.status == "REJECTED":
            template["rejected_reason"] = body.reason
        else:
            template.pop("rejected_reason", None)
        value: dict[str, Any] = {
            "event": body.status,
            "reason": body.reason,
            "message_template_category": template.get("category"),
        }
        if body.status == "PAUSED":
            value["other_info"] = {
                "title": "FIRST_PAUSE",
                "description": body.description or PAUSE_DESCRIPTION,
            }
        elif body.status == "DISABLED":
            value["disable_info"] = {"disable_date": int(time.time())}
        return await post(waba_id, "message_template_status_update", template, value)

    @router.post("/category")
    async def change_category(waba_id: str, body: CategoryChange) -> dict[str, Any]:
        template = find(waba_id, body)
        current = str(template.get("category", "UTILITY"))
        if body.announce:
            # Meta tells a day ahead; `new_category` is then the category the template has now.
            value = {
                "correct_category": body.category,
                "new_category": current,
                "category_update_timestamp": int(time.time()) + 24 * 3600,
            }
        else:
            template["category"] = body.category
            value = {"previous_category": current, "new_category": body.category}
        return await post(waba_id, "template_category_update", template, value)

    @router.post("/quality")
    async def change_quality(waba_id: str, body: QualityChange) -> dict[str, Any]:
        template = find(waba_id, body)
        previous = template.get("quality_score")
        before = previous.get("score") if isinstance(previous, dict) else None
        template["quality_score"] = {"score": body.quality, "date": int(time.time())}
        value = {"previous_quality_score": before or "UNKNOWN", "new_quality_score": body.quality}
        return await post(waba_id, "message_template_quality_update", template, value)

    return router
