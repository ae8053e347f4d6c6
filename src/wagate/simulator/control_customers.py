"""``/_sim/`` endpoints about customers: who they are, what they write, what their phones report.

- ``POST /_sim/customers`` ``{phone_number_id, phone_number?, user_id?, username?}``: create or
  update a customer of the channel's WABA (by number, by user id, or both when they belong
  together); ``username`` set to a string gives the customer a username (which hides the number),
  ``null`` takes it away, absent leaves it. Answers ``{phone_number, wa_id, user_id, username}``.
- ``GET /_sim/customers?phone_number_id=&phone_number=`` (or ``&user_id=``): one customer; any
  number has a user id (so tests can learn it), an unknown user id is a 404.
- ``POST /_sim/inbound`` ``{phone_number_id, from? | user_id?, username?, text, name?,
  timestamp?}``: a customer message as a signed webhook. ``from`` is a number, ``user_id`` a BSUID
  (one never seen is a customer known only by it); ``username`` gives the customer that username
  first. A customer with a username writes without ``from`` and ``wa_id``. While Meta's AI agent
  holds the conversation (control_routing.py) it comes on the ``standby`` field.
- ``POST /_sim/statuses`` ``{phone_number_id, wamid, status, recipient_id?, recipient_user_id?,
  biz_opaque_callback_data?, errors?, pricing_category?, billable?, timestamp?}``: any status
  webhook; what is missing comes from the log of sends (`billable` from the pricing rules of the day).

Both webhook pushes try once at once and report ``delivered``; a failed attempt keeps retrying in
the background.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from wagate.simulator.customers import Customer, CustomerConflict, digits_of, is_user_id
from wagate.simulator.payloads import Recipient, error_item, inbound_payload, status_payload
from wagate.simulator.send_log import SentRecord, new_wamid
from wagate.simulator.state import SimulatorState
from wagate.simulator.webhooks import WebhookSender

MAX_USERNAME_LENGTH = 64


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CustomerBody(_Body):
    phone_number_id: str = Field(min_length=1)
    phone_number: str | None = None
    user_id: str | None = None
    username: str | None = Field(default=None, min_length=1, max_length=MAX_USERNAME_LENGTH)


class InboundBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    phone_number_id: str = Field(min_length=1)
    from_: str | None = Field(default=None, alias="from")
    user_id: str | None = None
    username: str | None = Field(default=None, min_length=1, max_length=MAX_USERNAME_LENGTH)
    text: str = Field(min_length=1)
    name: str | None = None
    timestamp: int | None = None  # Unix seconds; in the past to test an expired 24-hour window


class StatusBody(_Body):
    phone_number_id: str = Field(min_length=1)
    wamid: str = Field(min_length=1)
    status: str = Field(min_length=1)
    recipient_id: str | None = None
    recipient_user_id: str | None = None
    biz_opaque_callback_data: str | None = None
    errors: list[dict[str, Any]] | None = None
    pricing_category: str | None = None
    # Whether Meta charges it; None: by the pricing rules of the status's day (`SimulatorState.billable`,
    # the customer's window taken as open, as it is for a service message).
    billable: bool | None = None
    timestamp: int | None = None


def _unprocessable(detail: str) -> HTTPException:
    return HTTPException(status_code=422, detail=detail)


def _wa_id(phone_number: str | None) -> str | None:
    if phone_number is None:
        return None
    digits = digits_of(phone_number)
    if not 5 <= len(digits) <= 15:
        raise _unprocessable(f"phone_number {phone_number!r} is not a phone number")
    return digits


def _user_id(user_id: str | None) -> str | None:
    if user_id is not None and not is_user_id(user_id):
        raise _unprocessable(f"user_id {user_id!r} is not a business-scoped user id (e.g. AZ.1349120865)")
    return user_id


def _customer(state: SimulatorState, waba_id: str, phone_number: str | None, user_id: str | None) -> Customer:
    wa_id, bsuid = _wa_id(phone_number), _user_id(user_id)
    if wa_id is None and bsuid is None:
        raise _unprocessable("give phone_number (from) or user_id")
    try:
        return state.customers.resolve(waba_id, wa_id, bsuid)
    except CustomerConflict as conflict:
        raise _unprocessable(str(conflict)) from None


def _recipient_of(state: SimulatorState, record: SentRecord) -> Recipient:
    if record.recipient is not None:
        return Recipient(state.customers.for_user_id(record.waba_id, record.user_id), by_user_id=True)
    return Recipient(state.customers.for_number(record.waba_id, digits_of(record.to or "")))


def build_customer_router(state: SimulatorState, sender: WebhookSender) -> APIRouter:
    router = APIRouter(prefix="/_sim")

    @router.post("/customers")
    async def put_customer(body: CustomerBody) -> dict[str, Any]:
        channel = state.channel(body.phone_number_id)
        customer = _customer(state, channel.waba_id, body.phone_number, body.user_id)
        if "username" in body.model_fields_set:
            customer.username = body.username
        return customer.to_json()

    @router.get("/customers")
    async def get_customer(
        phone_number_id: str, phone_number: str | None = None, user_id: str | None = None
    ) -> dict[str, Any]:
        waba_id = state.channel(phone_number_id).waba_id
        if phone_number is None and user_id is not None:
            found = state.customers.find_user_id(waba_id, _user_id(user_id) or "")
            if found is None:
                raise HTTPException(status_code=404, detail=f"no customer with user_id {user_id}")
            return found.to_json()
        return _customer(state, waba_id, phone_number, user_id).to_json()

    @router.post("/inbound")
    async def inbound(body: InboundBody) -> dict[str, Any]:
        channel = state.channel(body.phone_number_id)
        customer = _customer(state, channel.waba_id, body.from_, body.user_id)
        if body.username is not None:
            customer.username = body.username
        wamid = new_wamid(customer.wa_id if customer.phone_visible and customer.wa_id else customer.user_id)
        timestamp = body.timestamp if body.timestamp is not None else int(time.time())
        key = (channel.phone_number_id, customer.user_id)
        state.last_inbound[key] = max(timestamp, state.last_inbound.get(key, 0))
        # A conversation Meta's AI agent holds comes on `standby` (`POST /_sim/handover`).
        field = "standby" if key in state.agent_holds else "messages"
        payload = inbound_payload(
            channel, customer, wamid=wamid, text=body.text, name=body.name, timestamp=timestamp, field=field
        )
        delivered = await sender.deliver_now(payload)
        return {"wamid": wamid, "delivered": delivered, "user_id": customer.user_id}

    @router.post("/statuses")
    async def push_status(body: StatusBody) -> dict[str, Any]:
        channel = state.channel(body.phone_number_id)
        known = state.by_wamid.get(body.wamid)
        if body.recipient_id is not None or body.recipient_user_id is not None:
            customer = _customer(state, channel.waba_id, body.recipient_id, body.recipient_user_id)
            recipient = Recipient(customer, by_user_id=body.recipient_id is None)
        elif known is not None:
            recipient = _recipient_of(state, known)
        else:
            raise _unprocessable(f"unknown wamid {body.wamid}: give recipient_id or recipient_user_id")
        callback = body.biz_opaque_callback_data
        if callback is None and known is not None:
            callback = known.biz_opaque_callback_data
        errors = body.errors
        if body.status == "failed" and not errors:
            errors = [error_item(131026, "Message undeliverable", "Message Undeliverable.")]
        category = body.pricing_category
        if category is None and known is not None:
            category = (known.template_category or "service").lower()
        billable = body.billable
        if billable is None and category is not None:
            at = float(body.timestamp) if body.timestamp is not None else time.time()
            billable = state.billable(category, True, at)
        payload = status_payload(
            channel,
            recipient,
            wamid=body.wamid,
            status=body.status,
            biz_opaque_callback_data=callback,
            pricing_category=category,
            billable=billable,
            errors=errors,
            timestamp=body.timestamp,
        )
        delivered = await sender.deliver_now(payload)
        return {"delivered": delivered}

    return router
