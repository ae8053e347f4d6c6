"""``/_sim/`` endpoints for Meta of November 2026 about customers: Conversation Routing (Meta Business
Agent) and user id changes (docs/simulator.md).

- ``POST /_sim/handover`` ``{phone_number_id, phone_number? | user_id?, to: "agent" | "app", text?,
  reply?}``: hands the customer's conversation to Meta's AI agent, or back to the app.
  - ``to: "agent"``: a ``messaging_handovers`` webhook (``control_taken``: the app, the previous
    owner, is told that the agent took the thread), then standby traffic: the customer's message
    ``text`` on ``standby`` (default "I have a question"), the agent's reply ``reply`` as a message
    echo (default "Hello! I am the business's AI assistant."), and the echo's statuses (``sent``,
    ``delivered``, and ``read`` when enabled) on ``standby``. From then on the customer's messages
    (``/_sim/inbound``) come on ``standby``, until a handover back or a service message the app
    sends them (Meta: such a send takes the conversation over).
  - ``to: "app"``: a ``messaging_handovers`` webhook (``control_passed``: the agent passed the thread
    to the app, the new owner).
  Answers ``{to, user_id, delivered, wamids: {message, echo}}``.
- ``POST /_sim/user_id_change`` ``{phone_number_id, phone_number? | user_id?, new_user_id?}``: Meta
  gives the customer a new business-scoped user id (a new random one unless given) and sends the
  ``user_changed_user_id`` system message. Answers ``{previous_user_id, user_id, wamid, delivered}``.

Webhooks go out one after another, each tried once at once (``delivered`` says whether all were
taken) and retried in the background when refused, like ``/_sim/inbound``.
"""

from __future__ import annotations

import random
import time
from typing import Any, Literal

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from wagate.simulator.config import ChannelInfo
from wagate.simulator.control_customers import _customer
from wagate.simulator.customers import Customer, CustomerConflict, country_of, is_user_id
from wagate.simulator.payloads import Recipient, envelope, inbound_payload, status_update, statuses_payload
from wagate.simulator.send_log import new_wamid
from wagate.simulator.state import SimulatorState
from wagate.simulator.webhooks import WebhookSender


class HandoverBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    phone_number_id: str = Field(min_length=1)
    phone_number: str | None = None
    user_id: str | None = None
    to: Literal["agent", "app"]
    text: str = Field(default="I have a question", min_length=1)
    reply: str = Field(default="Hello! I am the business's AI assistant.", min_length=1)


class UserIdChangeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    phone_number_id: str = Field(min_length=1)
    phone_number: str | None = None
    user_id: str | None = None
    new_user_id: str | None = None


def handover_payload(channel: ChannelInfo, customer: Customer, *, to_agent: bool, timestamp: int) -> Any:
    """A ``messaging_handovers`` change as observed in 2026: no ``metadata``, the business number as
    ``recipient``, the customer as ``sender``, and the object its ``type`` names with the roles."""
    kind = "control_taken" if to_agent else "control_passed"
    roles = (
        {"previous_owner_app_role": "business_app", "new_owner_app_role": "meta_business_agent"}
        if to_agent
        else {"previous_owner_app_role": "meta_business_agent", "new_owner_app_role": "business_app"}
    )
    sender: dict[str, str] = {"user_id": customer.user_id}
    if customer.phone_visible:
        assert customer.wa_id is not None  # for mypy: phone_visible says so
        sender["phone_number"] = customer.wa_id
    value = {
        "messaging_product": "whatsapp",
        "recipient": {
            "display_phone_number": channel.display_phone_number,
            "phone_number_id": channel.phone_number_id,
        },
        "sender": sender,
        "timestamp": str(timestamp),
        "type": kind,
        kind: roles,
    }
    change = {"value": value, "field": "messaging_handovers"}
    return {"object": "whatsapp_business_account", "entry": [{"id": channel.waba_id, "changes": [change]}]}


def echo_payload(channel: ChannelInfo, customer: Customer, *, wamid: str, text: str, timestamp: int) -> Any:
    """The agent's reply as a message echo on ``standby``: ``from`` the business number, ``to`` the
    customer (as Meta documents echoes), with the customer's contact beside it."""
    contact: dict[str, Any] = {"user_id": customer.user_id}
    echo: dict[str, Any] = {"from": channel.display_phone_number}
    if customer.phone_visible:
        assert customer.wa_id is not None
        contact["wa_id"] = customer.wa_id
        echo["to"] = customer.wa_id
    echo |= {
        "to_user_id": customer.user_id,
        "id": wamid,
        "timestamp": str(timestamp),
        "type": "text",
        "text": {"body": text},
    }
    return envelope(channel, {"contacts": [contact], "message_echoes": [echo]}, "standby")


def user_id_change_payload(
    channel: ChannelInfo, customer: Customer, *, previous: str, wamid: str, timestamp: int
) -> Any:
    """Meta's ``user_changed_user_id`` system message: no ``contacts``; ``from`` when the number is
    shown (pywa 4.5 reads it), ``from_user_id`` the old id, ``system`` the new and the old."""
    message: dict[str, Any] = {}
    if customer.phone_visible:
        message["from"] = customer.wa_id
    message |= {
        "from_user_id": previous,
        "id": wamid,
        "timestamp": str(timestamp),
        "type": "system",
        "system": {
            "body": "User changed their WhatsApp user id",
            "type": "user_changed_user_id",
            "user_id": customer.user_id,
            "previous_user_id": previous,
        },
    }
    return envelope(channel, {"messages": [message]})


def _new_user_id(customer: Customer) -> str:
    country = (
        customer.user_id.split(".", 1)[0] if "." in customer.user_id else country_of(customer.wa_id or "")
    )
    return f"{country}.{random.randrange(10**19, 10**20)}"


def build_routing_router(state: SimulatorState, sender: WebhookSender) -> APIRouter:
    router = APIRouter(prefix="/_sim")

    async def deliver_all(payloads: list[Any]) -> bool:
        delivered = True
        for payload in payloads:  # in order: each tried before the next is sent
            delivered = await sender.deliver_now(payload) and delivered
        return delivered

    @router.post("/handover")
    async def handover(body: HandoverBody) -> dict[str, Any]:
        channel = state.channel(body.phone_number_id)
        customer = _customer(state, channel.waba_id, body.phone_number, body.user_id)
        key = (channel.phone_number_id, customer.user_id)
        now = int(time.time())
        if body.to == "app":
            state.agent_holds.discard(key)
            delivered = await deliver_all(
                [handover_payload(channel, customer, to_agent=False, timestamp=now)]
            )
            return {"to": "app", "user_id": customer.user_id, "delivered": delivered, "wamids": {}}
        state.agent_holds.add(key)
        state.last_inbound[key] = max(now, state.last_inbound.get(key, 0))
        shown = customer.wa_id if customer.phone_visible and customer.wa_id else customer.user_id
        asked, answered = new_wamid(shown), new_wamid(shown)
        payloads = [
            handover_payload(channel, customer, to_agent=True, timestamp=now),
            inbound_payload(
                channel, customer, wamid=asked, text=body.text, name=None, timestamp=now, field="standby"
            ),
            # The agent answers a moment later (Meta's timestamps are whole seconds: the thread's order).
            echo_payload(channel, customer, wamid=answered, text=body.reply, timestamp=now + 1),
        ]
        recipient = Recipient(customer, by_user_id=not customer.phone_visible)
        steps = ["sent", "delivered"] + (["read"] if state.config.read_enabled else [])
        for status in steps:
            update = status_update(channel, recipient, wamid=answered, status=status, timestamp=now + 1)
            statuses = statuses_payload([update])
            statuses["entry"][0]["changes"][0]["field"] = "standby"
            payloads.append(statuses)
        delivered = await deliver_all(payloads)
        return {
            "to": "agent",
            "user_id": customer.user_id,
            "delivered": delivered,
            "wamids": {"message": asked, "echo": answered},
        }

    @router.post("/user_id_change")
    async def user_id_change(body: UserIdChangeBody) -> dict[str, Any]:
        channel = state.channel(body.phone_number_id)
        customer = _customer(state, channel.waba_id, body.phone_number, body.user_id)
        new_user_id = body.new_user_id or _new_user_id(customer)
        if not is_user_id(new_user_id) or new_user_id == customer.user_id:
            raise HTTPException(status_code=422, detail=f"new_user_id {new_user_id!r} is not a new user id")
        try:
            previous = state.customers.change_user_id(customer, new_user_id)
        except CustomerConflict as conflict:
            raise HTTPException(status_code=422, detail=str(conflict)) from None
        _rekey(state, channel.phone_number_id, previous, new_user_id)
        wamid = new_wamid(customer.wa_id if customer.phone_visible and customer.wa_id else new_user_id)
        payload = user_id_change_payload(
            channel, customer, previous=previous, wamid=wamid, timestamp=int(time.time())
        )
        delivered = await deliver_all([payload])
        return {"previous_user_id": previous, "user_id": new_user_id, "wamid": wamid, "delivered": delivered}

    return router


def _rekey(state: SimulatorState, phone_number_id: str, previous: str, current: str) -> None:
    """The customer's window and who holds their conversation follow them to the new id."""
    old, new = (phone_number_id, previous), (phone_number_id, current)
    if old in state.last_inbound:
        state.last_inbound[new] = state.last_inbound.pop(old)
    if old in state.agent_holds:
        state.agent_holds.discard(old)
        state.agent_holds.add(new)
