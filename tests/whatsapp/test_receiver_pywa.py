"""The gateway's receiver accepts Meta's 2026 webhook shapes as pywa reads them (issue 19, point 5).

Every body here is written by hand in the shape Meta documents for 2026 (API.md section 13):
customers known by business-scoped user id (BSUID) and username, statuses with ``contacts[]`` and
``recipient_user_id``, several statuses in one POST, a ``user_preferences`` stop. pywa 4.5.0, a
widely used WhatsApp Cloud API client, is the judge of those shapes: each exact raw body is first
parsed with pywa's own models (``Message``, ``MessageStatus`` for every status, ``UserMarketingPreferences``),
and what pywa reads is asserted. The same bytes, signed as Meta signs them, then go to
``POST /webhooks/whatsapp``, and the test checks over HTTP what a user of the gateway sees: statuses
moved, user ids learned, a resolved conversation reopened, the window open, a marketing template
refused. So each shape is one a real client reads the way Meta documents it, and the gateway applies
it; no body is bent to suit either side.

pywa reads only ``entry[0].changes[0]`` of a POST, so a batch of statuses here is one change with
several statuses, each parsed with ``MessageStatus.from_update(..., contact_idx, status_idx)``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from pywa.client import WhatsApp
from pywa.errors import MessageUndeliverable
from pywa.types.base_update import RawUpdate
from pywa.types.message import Message
from pywa.types.message_status import MessageStatus, MessageStatusType, PricingCategory, PricingModel
from pywa.types.user_preferences import MarketingPreference, UserMarketingPreferences, UserPreferenceCategory

from support.app_in_thread import sql
from support.harness import APP_SECRET, MAIN, Gateway, new_number, wait_for
from wagate.whatsapp.signature import sign

SALE = {"name": "spring_sale", "language": "en", "parameters": ["20%", "20%", "spring"]}
ORDER = {"name": "order_update", "language": "en", "parameters": ["A-1", "shipped"]}
UNDELIVERABLE = {
    "code": 131026,
    "title": "Message undeliverable",
    "message": "Message undeliverable",
    "error_data": {"details": "Message Undeliverable."},
    "href": "https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/",
}
AUTHENTICATION_PRICING = {
    "billable": True,
    "pricing_model": "PMP",
    "type": "regular",
    "category": "authentication",
}

_serial = iter(range(1_000_000))


def new_user_id() -> str:
    """A BSUID no other test uses: country code, a dot, digits."""
    return f"AZ.{time.time_ns()}{next(_serial)}"


def new_wamid() -> str:
    return f"wamid.HBgM{time.time_ns()}{next(_serial)}"


@pytest.fixture(scope="module")
def wa() -> Iterator[WhatsApp]:
    """A pywa client as an application builds it, without a webhook server: nothing goes on the network."""
    session = httpx.Client()
    client = WhatsApp(
        phone_id=MAIN["phone_number_id"],
        token="not-used",
        waba_id=MAIN["waba_id"],
        session=session,
        server=None,
        app_secret=APP_SECRET,
    )
    try:
        yield client
    finally:
        session.close()


@pytest.fixture
def driven_statuses(gateway: Gateway) -> Iterator[None]:
    """The simulator sends no statuses of its own: the test's hand-written ones are the only ones."""
    gateway.sim.configure(auto_statuses=False)
    try:
        yield
    finally:
        gateway.sim.configure(auto_statuses=True)


def webhook(value: dict[str, Any], field: str = "messages") -> bytes:
    metadata = {
        "display_phone_number": MAIN["display_phone_number"],
        "phone_number_id": MAIN["phone_number_id"],
    }
    change = {"value": {"messaging_product": "whatsapp", "metadata": metadata, **value}, "field": field}
    body = {"object": "whatsapp_business_account", "entry": [{"id": MAIN["waba_id"], "changes": [change]}]}
    return orjson.dumps(body)


def update_of(wa: WhatsApp, raw: bytes) -> RawUpdate:
    """The bytes as pywa's webhook server hands them to its models, once its signature check passed."""
    signature = sign(APP_SECRET, raw)
    assert wa.webhook_update_validator(raw, signature) is None
    return RawUpdate(raw, hmac_header=signature, update_hash=hashlib.blake2s(raw, digest_size=16).hexdigest())


def post(gateway: Gateway, raw: bytes) -> None:
    response = gateway.http.post(
        f"{gateway.url}/webhooks/whatsapp",
        content=raw,
        headers={"X-Hub-Signature-256": sign(APP_SECRET, raw), "Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text


def parsed_statuses(wa: WhatsApp, update: RawUpdate) -> list[MessageStatus[Any]]:
    """Every status of the POST in pywa's model, each with the contact that names its recipient."""
    value = update.value
    parsed = []
    for index, status in enumerate(value["statuses"]):
        wanted = (status.get("recipient_id"), status.get("recipient_user_id"))
        [contact] = [
            i for i, c in enumerate(value["contacts"]) if (c.get("wa_id"), c.get("user_id")) == wanted
        ]
        parsed.append(MessageStatus.from_update(wa, update, contact_idx=contact, status_idx=index))
    return parsed


def sent_otp(gateway: Gateway, number: str) -> tuple[str, str, str]:
    """An OTP sent through the gateway: (our id, Meta's wamid, the tracker the send carried to Meta)."""
    response = gateway.otp(number)
    assert response.status_code == 201, response.text
    message_id: str = response.json()["id"]
    wamid: str = wait_for(lambda: gateway.message(message_id)["upstream_message_id"], what="the wamid")
    sent = gateway.sim.http.get(f"{gateway.sim.url}/_sim/messages", params={"wamid": wamid})
    [request] = sent.json()["data"]  # the send as Meta received it
    tracker: str = request["body"]["biz_opaque_callback_data"]
    return message_id, wamid, tracker


def window_open(gateway: Gateway, number: str) -> bool:
    response = gateway.http.get(
        gateway.v1("/whatsapp/messages/window"),
        params={"channel_id": gateway.ids["main"], "phone_number": number},
        headers=gateway.headers(),
    )
    assert response.status_code == 200, response.text
    is_open: bool = response.json()["open"]
    return is_open


def conversation_status(gateway: Gateway, message_id: str) -> str:
    status: str = gateway.message(message_id)["conversation"]["status"]
    return status


def text_message(wamid: str, text: str, **sender: str) -> dict[str, Any]:
    return {**sender, "id": wamid, "timestamp": str(int(time.time())), "type": "text", "text": {"body": text}}


def test_a_message_from_a_username_customer_reopens_the_conversation_of_their_number(
    gateway: Gateway, wa: WhatsApp, driven_statuses: None
) -> None:
    number, user_id = new_number(), new_user_id()
    message_id, wamid, tracker = sent_otp(gateway, number)
    assert conversation_status(gateway, message_id) == "resolved" and not window_open(gateway, number)
    # The delivered status shows the customer's user id beside the number: the gateway learns the pair.
    delivered = webhook(
        {
            "contacts": [{"wa_id": number[1:], "user_id": user_id}],
            "statuses": [
                {
                    "id": wamid,
                    "status": "delivered",
                    "timestamp": str(int(time.time())),
                    "recipient_id": number[1:],
                    "recipient_user_id": user_id,
                    "biz_opaque_callback_data": tracker,
                    "pricing": AUTHENTICATION_PRICING,
                }
            ],
        }
    )
    [status] = parsed_statuses(wa, update_of(wa, delivered))
    assert (status.status, status.from_user.bsuid, status.from_user.wa_id) == (
        MessageStatusType.DELIVERED,
        user_id,
        number[1:],
    )
    post(gateway, delivered)
    wait_for(lambda: gateway.message(message_id)["user_id"] == user_id, what="the user id to be learned")

    # Then the customer adopts a username: Meta hides the number; the message has no `from`, the
    # contact no `wa_id`.
    inbound_wamid = new_wamid()
    raw = webhook(
        {
            "contacts": [{"profile": {"name": "Aysel", "username": "aysel.m"}, "user_id": user_id}],
            "messages": [text_message(inbound_wamid, "is my order ready?", from_user_id=user_id)],
        }
    )
    message = Message.from_update(wa, update_of(wa, raw))
    user = message.from_user
    assert (user.bsuid, user.wa_id, user.username, user.name) == (user_id, None, "aysel.m", "Aysel")
    assert (message.id, message.text, message.chat.id) == (inbound_wamid, "is my order ready?", user_id)
    assert message.metadata.phone_number_id == MAIN["phone_number_id"]

    post(gateway, raw)
    wait_for(lambda: conversation_status(gateway, message_id) == "open", what="the conversation to reopen")
    assert window_open(gateway, number)
    stored = sql(
        gateway.database_url,
        "SELECT phone_number, user_id, text, conversation_id FROM messages WHERE upstream_message_id = :w",
        w=inbound_wamid,
    )
    conversation_id = gateway.message(message_id)["conversation"]["id"]
    assert stored == [(number, user_id, "is my order ready?", conversation_id)]
    [(username, name)] = sql(
        gateway.database_url, "SELECT username, name FROM contacts WHERE phone_number = :n", n=number
    )
    assert (username, name) == ("aysel.m", "Aysel")


def test_a_message_from_a_number_opens_the_window_and_teaches_the_user_id(
    gateway: Gateway, wa: WhatsApp, driven_statuses: None
) -> None:
    number, user_id = new_number(), new_user_id()
    message_id, _, _ = sent_otp(gateway, number)
    assert conversation_status(gateway, message_id) == "resolved" and not window_open(gateway, number)
    inbound_wamid = new_wamid()
    raw = webhook(
        {
            "contacts": [{"profile": {"name": "Leyla"}, "wa_id": number[1:], "user_id": user_id}],
            "messages": [
                text_message(inbound_wamid, "hello", **{"from": number[1:], "from_user_id": user_id})
            ],
        }
    )
    message = Message.from_update(wa, update_of(wa, raw))
    user = message.from_user
    assert (user.bsuid, user.wa_id, user.username, user.name) == (user_id, number[1:], None, "Leyla")
    assert (message.id, message.text) == (inbound_wamid, "hello")

    post(gateway, raw)
    wait_for(lambda: window_open(gateway, number), what="the window to open")
    assert conversation_status(gateway, message_id) == "open"
    # The user id now reaches the number's customer: a reply by user id is a session message in
    # the number's window and conversation.
    reply = gateway.send({"user_id": user_id, "text": "Yes, it ships today."})
    assert reply.status_code == 201, reply.text
    assert reply.json()["sent_as"] == "session"
    sent = gateway.message(reply.json()["id"])
    assert (sent["phone_number"], sent["user_id"]) == (number, user_id)
    assert sent["conversation"]["id"] == gateway.message(message_id)["conversation"]["id"]


def test_a_batch_of_statuses_with_contacts_moves_each_message(
    gateway: Gateway, wa: WhatsApp, driven_statuses: None
) -> None:
    delivered_to, read_by, no_whatsapp = new_number(), new_number(), new_number()
    first_user, second_user = new_user_id(), new_user_id()
    first, second, third = (sent_otp(gateway, n) for n in (delivered_to, read_by, no_whatsapp))
    assert [gateway.message(sent[0])["status"] for sent in (first, second, third)] == ["sent"] * 3
    cost_before = gateway.message(first[0])["cost"]
    now = int(time.time())

    def status(sent: tuple[str, str, str], kind: str, at: int, number: str, **more: Any) -> dict[str, Any]:
        _, wamid, tracker = sent
        return {
            "id": wamid,
            "status": kind,
            "timestamp": str(at),
            "recipient_id": number[1:],
            "biz_opaque_callback_data": tracker,
            **more,
        }

    raw = webhook(
        {
            "contacts": [
                {"wa_id": delivered_to[1:], "user_id": first_user},
                {"profile": {"username": "rustam.b"}, "wa_id": read_by[1:], "user_id": second_user},
                # A number without WhatsApp has no user id: the failed status's contact has only wa_id.
                {"wa_id": no_whatsapp[1:]},
            ],
            "statuses": [
                status(
                    first,
                    "sent",
                    now - 2,
                    delivered_to,
                    recipient_user_id=first_user,
                    pricing=AUTHENTICATION_PRICING,
                ),
                status(
                    first,
                    "delivered",
                    now - 1,
                    delivered_to,
                    recipient_user_id=first_user,
                    pricing=AUTHENTICATION_PRICING,
                ),
                status(second, "read", now, read_by, recipient_user_id=second_user),
                status(third, "failed", now, no_whatsapp, errors=[UNDELIVERABLE]),
            ],
        }
    )
    parsed = parsed_statuses(wa, update_of(wa, raw))
    assert [(s.id, s.status, s.tracker) for s in parsed] == [
        (first[1], MessageStatusType.SENT, first[0]),
        (first[1], MessageStatusType.DELIVERED, first[0]),
        (second[1], MessageStatusType.READ, second[0]),
        (third[1], MessageStatusType.FAILED, third[0]),
    ]
    assert [(s.from_user.wa_id, s.from_user.bsuid, s.from_user.username) for s in parsed] == [
        (delivered_to[1:], first_user, None),
        (delivered_to[1:], first_user, None),
        (read_by[1:], second_user, "rustam.b"),
        (no_whatsapp[1:], None, None),
    ]
    for priced in parsed[:2]:
        assert priced.pricing is not None
        assert (priced.pricing.billable, priced.pricing.model, priced.pricing.category) == (
            True,
            PricingModel.PMP,
            PricingCategory.AUTHENTICATION,
        )
    assert parsed[2].pricing is None and parsed[2].error is None
    assert isinstance(parsed[3].error, MessageUndeliverable) and parsed[3].error.code == 131026

    post(gateway, raw)
    delivered = gateway.wait_status(first[0], "delivered")
    assert delivered["user_id"] == first_user
    assert delivered["cost"] == cost_before  # Meta charged it as the gateway priced it
    read = gateway.wait_status(second[0], "read")
    assert read["user_id"] == second_user
    failed = gateway.wait_status(third[0], "failed")
    assert failed["external_error"] == "131026: Message undeliverable"
    assert failed["user_id"] is None and failed["cost"]["amount"] == "0"
    [(username,)] = sql(
        gateway.database_url, "SELECT username FROM contacts WHERE phone_number = :n", n=read_by
    )
    assert username == "rustam.b"


def test_a_marketing_stop_refuses_marketing_templates(gateway: Gateway, wa: WhatsApp) -> None:
    number, user_id = new_number(), new_user_id()
    detail = "User requested to stop marketing messages"
    now = int(time.time())
    raw = webhook(
        {
            "contacts": [{"profile": {"name": "Ann"}, "wa_id": number[1:], "user_id": user_id}],
            "user_preferences": [
                {
                    "wa_id": number[1:],
                    "user_id": user_id,
                    "detail": detail,
                    "category": "marketing_messages",
                    "value": "stop",
                    "timestamp": now,  # Meta documents an integer here
                }
            ],
        },
        field="user_preferences",
    )
    preference = UserMarketingPreferences.from_update(wa, update_of(wa, raw))
    user = preference.from_user
    assert (user.bsuid, user.wa_id, user.name) == (user_id, number[1:], "Ann")
    assert (preference.value, preference.category, preference.detail) == (
        MarketingPreference.STOP,
        UserPreferenceCategory.MARKETING_MESSAGES,
        detail,
    )
    assert int(preference.timestamp.timestamp()) == now and not preference

    # Before the stop a marketing template to the number goes.
    assert gateway.send({"phone_number": number, "template": SALE}).status_code == 201

    post(gateway, raw)

    def refused() -> httpx.Response | None:
        response = gateway.send({"phone_number": number, "template": SALE})
        return response if response.status_code == 422 else None

    response = wait_for(refused, what="the stop to be applied")
    assert response.json()["error"]["code"] == "marketing_preference_stopped"
    # The same customer by user id is refused too; a utility template still goes.
    by_user_id = gateway.send({"user_id": user_id, "template": SALE})
    assert by_user_id.status_code == 422, by_user_id.text
    assert by_user_id.json()["error"]["code"] == "marketing_preference_stopped"
    assert gateway.send({"phone_number": number, "template": ORDER}).status_code == 201
