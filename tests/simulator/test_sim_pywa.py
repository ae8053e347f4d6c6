"""pywa, a real WhatsApp Cloud API client, keeps the simulator honest.

pywa is used as Meta's users use it: a ``WhatsApp`` client whose Graph base URL is the simulator's
sends texts and templates, and pywa's own webhook server (its FastAPI routes, served by uvicorn on
a loopback socket, signature validation on) receives the simulator's webhooks. Every status and
every customer message must parse in pywa's models.

pywa 4.5.0 dispatches only the first status of a POST to ``on_message_status`` (reads
``entry[0].changes[0].statuses[0]``; david-lev/pywa#229, fix proposed in #233). Its raw-update
handler gets every POST, so there each status of a batched POST is parsed with pywa's own
``MessageStatus.from_update(..., contact_idx, status_idx)``, its contact picked by wa_id / user_id.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import fastapi
import httpx
import pytest
from pywa import WhatsApp
from pywa.errors import RateLimitHit, TemplatePaused
from pywa.handlers import PhoneNumberChangeHandler
from pywa.types import Message, MessageStatus, RawUpdate
from pywa.types.message import OutgoingMessage
from pywa.types.sent_update import RecipientType
from pywa.types.system import PhoneNumberChange, SystemType
from pywa.types.templates import (
    BodyText,
    TemplateCategoryUpdate,
    TemplateLanguage,
    TemplateQualityUpdate,
    TemplateStatusUpdate,
)
from sim_harness import APP_SECRET, PHONE_NUMBER_ID, TOKEN, WABA_ID, fast_config, register_test_channel

from wagate.simulator import (
    MAGIC_RATE_LIMITED,
    MAGIC_REENGAGEMENT,
    MAGIC_UNDELIVERABLE,
    RunningServer,
    create_simulator_app,
    run_in_thread,
)

TO = "994501234567"
OTHER = "994551234567"
STRANGER = "AZ.13491208655302741918"


def parsed_status(status: MessageStatus[Any], via: str) -> dict[str, Any]:
    return {
        "via": via,
        "id": status.id,
        "status": str(status.status),
        "tracker": status.tracker,
        "wa_id": status.from_user.wa_id,
        "bsuid": status.from_user.bsuid,
        "username": status.from_user.username,
        "error": status.error.code if status.error else None,
        "pricing": str(status.pricing.category) if status.pricing else None,
        "phone_id": status.metadata.phone_number_id,
    }


def contact_index(value: dict[str, Any], status: dict[str, Any]) -> int:
    """The contact beside a status: the one with exactly the status's wa_id and user_id."""
    wanted = (status.get("recipient_id"), status.get("recipient_user_id"))
    for index, contact in enumerate(value["contacts"]):
        if (contact.get("wa_id"), contact.get("user_id")) == wanted:
            return index
    raise AssertionError(f"no contact for {status} in {value['contacts']}")


@dataclass
class Inbox:
    """What pywa's handlers saw; they run on pywa's worker threads."""

    dispatched: list[dict[str, Any]] = field(default_factory=list)  # via on_message_status
    statuses: list[dict[str, Any]] = field(default_factory=list)  # every status of every POST
    batch_sizes: list[int] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)  # template lifecycle updates
    raw: list[RawUpdate] = field(default_factory=list)  # every POST, as pywa's raw update
    lock: threading.RLock = field(default_factory=threading.RLock)

    def wait_for(self, predicate: Callable[[Inbox], bool], what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if predicate(self):
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {self}")
            time.sleep(0.02)

    def of(self, wamid: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.statuses if s["id"] == wamid]


class PywaProblems(logging.Handler):
    """pywa logs (and swallows) an update it cannot parse; collect those."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.levelname} {record.getMessage()} {record.exc_text or ''}")


@dataclass
class World:
    wa: WhatsApp
    inbox: Inbox
    sim: RunningServer
    webhook_url: str
    http: httpx.Client
    problems: PywaProblems

    def control(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, self.sim.base_url + path, **kwargs)
        assert response.status_code == 200, response.text
        return response.json()

    def user_id(self, number: str) -> str:
        params = {"phone_number_id": PHONE_NUMBER_ID, "phone_number": number}
        return str(self.control("GET", "/_sim/customers", params=params)["user_id"])


def register_handlers(wa: WhatsApp, inbox: Inbox) -> None:
    @wa.on_message_status
    def on_status(client: WhatsApp, status: MessageStatus[Any]) -> None:
        with inbox.lock:
            inbox.dispatched.append(parsed_status(status, "on_message_status"))

    @wa.on_message
    def on_message(client: WhatsApp, message: Message) -> None:
        user = message.from_user
        with inbox.lock:
            inbox.messages.append(
                {
                    "id": message.id,
                    "text": message.text,
                    "name": user.name,
                    "username": user.username,
                    "wa_id": user.wa_id,
                    "bsuid": user.bsuid,
                    "chat": message.chat.id,
                }
            )

    def on_template(update: TemplateStatusUpdate | TemplateCategoryUpdate | TemplateQualityUpdate) -> None:
        seen = {"kind": type(update).__name__, "waba": update.id, "template_id": update.template_id}
        seen |= {"name": update.template_name, "language": str(update.template_language)}
        if isinstance(update, TemplateStatusUpdate):
            seen |= {
                "status": str(update.new_status),
                "reason": str(update.reason),
                "category": str(update.category),
            }
            seen |= {"pause": update.other_info.title if update.other_info else None}
        elif isinstance(update, TemplateCategoryUpdate):
            seen |= {"new": str(update.new_category), "correct": str(update.correct_category)}
            seen |= {"previous": str(update.previous_category)}
        else:
            seen |= {"new": str(update.new_quality_score), "previous": str(update.previous_quality_score)}
        with inbox.lock:
            inbox.templates.append(seen)

    wa.on_template_status_update(lambda _, update: on_template(update))
    wa.on_template_category_update(lambda _, update: on_template(update))
    wa.on_template_quality_update(lambda _, update: on_template(update))

    @wa.on_raw_update
    def on_raw(client: WhatsApp, update: RawUpdate) -> None:
        value = update.value
        statuses = value.get("statuses", [])
        parsed = [
            parsed_status(
                MessageStatus.from_update(
                    client, update, contact_idx=contact_index(value, status), status_idx=index
                ),
                "raw_update",
            )
            for index, status in enumerate(statuses)
        ]
        with inbox.lock:
            inbox.raw.append(update)
            inbox.statuses.extend(parsed)
            if statuses:
                inbox.batch_sizes.append(len(statuses))


@pytest.fixture
def world() -> Iterator[World]:
    server = fastapi.FastAPI()
    session = httpx.Client(timeout=10.0)
    wa = WhatsApp(
        phone_id=PHONE_NUMBER_ID,
        token=TOKEN,
        waba_id=WABA_ID,
        api_version="23.0",
        session=session,
        server=server,
        verify_token="verify-me",
        app_secret=APP_SECRET,
        validate_updates=True,
    )
    inbox = Inbox()
    register_handlers(wa, inbox)
    problems = PywaProblems()
    logging.getLogger("pywa").addHandler(problems)
    pywa_server = run_in_thread(server)
    sim = run_in_thread(create_simulator_app(fast_config(pywa_server.base_url + "/")))
    # The one change a user of the simulator makes: the Graph base URL.
    session.base_url = httpx.URL(sim.base_url + "/v23.0")
    http = httpx.Client(timeout=10.0)
    try:
        register_test_channel(http, sim.base_url)
        yield World(wa, inbox, sim, pywa_server.base_url + "/", http, problems)
    finally:
        logging.getLogger("pywa").removeHandler(problems)
        http.close()
        session.close()
        sim.request_stop()
        pywa_server.request_stop()
        sim.stop()
        pywa_server.stop()


def test_pywa_checks_the_simulators_signature(world: World) -> None:
    forged = world.http.post(
        world.webhook_url,
        content=b'{"object":"whatsapp_business_account","entry":[]}',
        headers={
            "Content-Type": "application/json",
            "X-Hub-Signature-256": "sha256=" + "0" * 64,
        },
    )
    assert forged.status_code == 403


def test_pywa_sends_and_parses_every_status(world: World) -> None:
    wa, inbox = world.wa, world.inbox
    # Statuses come due a while after the sends, so that the sends' statuses share POSTs.
    world.control(
        "POST",
        "/_sim/config",
        json={
            "read_enabled": True,
            "status_delays": {"sent": 0.3, "delivered": 0.6, "read": 0.9},
            "webhook_batch_window_seconds": 0.3,
        },
    )
    text = wa.send_message(to=TO, text="Salam", tracker="msg-text")
    template = wa.send_template(
        to="+" + OTHER,
        name="order_update",
        language=TemplateLanguage.ENGLISH,
        params=[BodyText.params("A-1001", "shipped")],
        tracker="msg-template",
    )
    no_whatsapp = wa.send_message(to=MAGIC_UNDELIVERABLE, text="hi", tracker="msg-1026")
    closed_window = wa.send_message(to=MAGIC_REENGAGEMENT, text="hi", tracker="msg-1047")
    assert (text.chat.id, text.input) == (TO, TO)
    assert (template.chat.id, template.input) == (OTHER, "+" + OTHER)
    with pytest.raises(RateLimitHit) as rate_limited:
        wa.send_message(to=MAGIC_RATE_LIMITED, text="hi")
    assert rate_limited.value.code == 130429

    inbox.wait_for(lambda i: len(i.statuses) >= 8, "8 statuses")
    time.sleep(0.3)  # nothing more may come
    assert len(inbox.statuses) == 8, inbox.statuses
    assert world.problems.records == []
    for sent, number, tracker, pricing in (
        (text, TO, "msg-text", "service"),
        (template, OTHER, "msg-template", "utility"),
    ):
        seen = inbox.of(sent.id)
        assert [s["status"] for s in seen] == ["sent", "delivered", "read"]
        for status in seen:
            assert (status["tracker"], status["wa_id"], status["username"], status["error"]) == (
                tracker,
                number,
                None,
                None,
            )
            assert RecipientType.from_recipient(status["bsuid"]) is RecipientType.BSUID
            assert status["phone_id"] == PHONE_NUMBER_ID
        assert [s["pricing"] for s in seen] == [pricing, pricing, None]
    [failed] = inbox.of(no_whatsapp.id)
    assert (failed["status"], failed["error"], failed["tracker"]) == ("failed", 131026, "msg-1026")
    assert (failed["wa_id"], failed["bsuid"]) == (MAGIC_UNDELIVERABLE.lstrip("+"), None)
    [failed] = inbox.of(closed_window.id)
    assert (failed["status"], failed["error"], failed["tracker"]) == ("failed", 131047, "msg-1047")
    # Batched POSTs: several statuses in one, each parsed; pywa's own dispatch got each POST's first.
    assert max(inbox.batch_sizes) > 1, inbox.batch_sizes
    assert len(inbox.dispatched) == len(inbox.batch_sizes)
    assert all({**d, "via": "raw_update"} in inbox.statuses for d in inbox.dispatched)
    # The user ids pywa read are the simulator's for those numbers.
    assert inbox.of(text.id)[0]["bsuid"] == world.user_id(TO)
    assert inbox.of(template.id)[0]["bsuid"] == world.user_id(OTHER)


def test_pywa_parses_customer_messages_and_sends_by_user_id(world: World) -> None:
    wa, inbox = world.wa, world.inbox
    user_id = world.user_id(TO)

    def inbound(**body: Any) -> str:
        reply = world.control(
            "POST", "/_sim/inbound", json={"phone_number_id": PHONE_NUMBER_ID, "text": "Salam", **body}
        )
        assert reply["delivered"] is True
        return str(reply["wamid"])

    plain = inbound(**{"from": "+" + TO}, name="Aysel")
    named = inbound(**{"from": TO}, name="Aysel", username="aysel.k")
    stranger = inbound(user_id=STRANGER, username="ghost")
    inbox.wait_for(lambda i: len(i.messages) == 3, "3 customer messages")
    assert world.problems.records == []
    by_id = {m["id"]: m for m in inbox.messages}
    assert by_id[plain] == {
        "id": plain,
        "text": "Salam",
        "name": "Aysel",
        "username": None,
        "wa_id": TO,
        "bsuid": user_id,
        "chat": user_id,  # pywa prefers the user id
    }
    assert by_id[named] | {"id": None} == {
        "id": None,
        "text": "Salam",
        "name": "Aysel",
        "username": "aysel.k",
        "wa_id": None,
        "bsuid": user_id,
        "chat": user_id,
    }
    assert (by_id[stranger]["username"], by_id[stranger]["wa_id"], by_id[stranger]["bsuid"]) == (
        "ghost",
        None,
        STRANGER,
    )

    # Replies by user id, as pywa does for a customer it knows by user id only.
    world.control("POST", "/_sim/config", json={"read_enabled": True})
    reply = wa.send_message(to=user_id, text="Hello again", tracker="by-user-id")
    assert (reply.chat.id, reply.input) == (user_id, user_id)
    [logged] = world.control("GET", "/_sim/messages", params={"user_id": user_id})["data"]
    assert logged["body"]["recipient"] == user_id and "to" not in logged["body"]
    inbox.wait_for(lambda i: len(i.of(reply.id)) == 3, "3 statuses of the reply")
    seen = inbox.of(reply.id)
    assert [s["status"] for s in seen] == ["sent", "delivered", "read"]
    # Her username hides her number; it shows on delivered and read.
    assert [(s["wa_id"], s["bsuid"], s["username"]) for s in seen] == [
        (None, user_id, None),
        (None, user_id, "aysel.k"),
        (None, user_id, "aysel.k"),
    ]
    assert {s["tracker"] for s in seen} == {"by-user-id"}
    assert world.problems.records == []


def test_pywa_parses_the_template_lifecycle_webhooks(world: World) -> None:
    """The simulator's template status, category and quality webhooks (API.md section 14) in pywa's
    own models, and a paused template refused with Meta's error."""
    wa, inbox = world.wa, world.inbox

    def change(what: str, **body: Any) -> dict[str, Any]:
        body = {"name": "order_update", "language": "en", **body}
        reply: dict[str, Any] = world.control("POST", f"/_sim/templates/{WABA_ID}/{what}", json=body)
        assert reply["delivered"] is True
        return reply

    template_id = change("status", status="PAUSED")["template"]["id"]
    with pytest.raises(TemplatePaused) as paused:
        wa.send_template(
            to=TO,
            name="order_update",
            language=TemplateLanguage.ENGLISH,
            params=[BodyText.params("A-1", "ok")],
        )
    assert paused.value.code == 132015
    change("status", status="APPROVED")
    change("status", status="REJECTED", reason="INCORRECT_CATEGORY")
    change("category", category="MARKETING", announce=True)
    change("category", category="MARKETING")
    change("quality", quality="RED")
    inbox.wait_for(lambda i: len(i.templates) == 6, "6 template updates")
    assert world.problems.records == []
    named = {"waba": WABA_ID, "template_id": template_id, "name": "order_update", "language": "en"}
    expected = [
        {"kind": "TemplateStatusUpdate", "status": "PAUSED", "reason": "NONE", "category": "UTILITY"}
        | {"pause": "FIRST_PAUSE"},
        {"kind": "TemplateStatusUpdate", "status": "APPROVED", "reason": "NONE", "category": "UTILITY"}
        | {"pause": None},
        {"kind": "TemplateStatusUpdate", "status": "REJECTED", "reason": "INCORRECT_CATEGORY"}
        | {"category": "UTILITY", "pause": None},
        {"kind": "TemplateCategoryUpdate", "new": "UTILITY", "correct": "MARKETING", "previous": "None"},
        {"kind": "TemplateCategoryUpdate", "new": "MARKETING", "correct": "None", "previous": "UTILITY"},
        {"kind": "TemplateQualityUpdate", "new": "RED", "previous": "UNKNOWN"},
    ]

    # pywa runs its handlers on worker threads: in any order.
    def key(seen: dict[str, Any]) -> str:
        return repr(sorted(seen.items()))

    assert sorted(map(key, inbox.templates)) == sorted(key(named | item) for item in expected)
    # The listing says what the webhooks said.
    [listed] = [
        t
        for t in world.control("GET", f"/_sim/templates/{WABA_ID}")["data"]
        if (t["name"], t["language"]) == ("order_update", "en")
    ]
    assert (listed["status"], listed["category"], listed["rejected_reason"]) == (
        "REJECTED",
        "MARKETING",
        "INCORRECT_CATEGORY",
    )
    assert listed["quality_score"]["score"] == "RED"


def test_pywa_parses_standby_traffic_handovers_and_user_id_changes(world: World) -> None:
    """API.md section 14: what the simulator sends while Meta's AI agent holds a conversation, when
    control changes, and when a customer's user id changes, all taken by pywa without a complaint.
    pywa 4.5.0 has no handler for `standby` and `messaging_handovers`: their items are parsed here
    with pywa's own models, as a pywa user would."""
    wa, inbox = world.wa, world.inbox
    changes: list[PhoneNumberChange] = []
    wa.add_handlers(PhoneNumberChangeHandler(lambda _, update: changes.append(update)))
    user_id = world.user_id(TO)
    customer = {"phone_number_id": PHONE_NUMBER_ID, "phone_number": TO}
    to_agent = world.control(
        "POST", "/_sim/handover", json=customer | {"to": "agent", "text": "Hi", "reply": "Hello"}
    )
    assert to_agent["delivered"] is True
    world.control("POST", "/_sim/handover", json=customer | {"to": "app"})
    changed = world.control("POST", "/_sim/user_id_change", json=customer)
    assert changed["previous_user_id"] == user_id and world.user_id(TO) == changed["user_id"]
    # handover, customer message, echo, sent, delivered, handover back, system message
    inbox.wait_for(lambda i: len(i.raw) == 7, "7 webhooks")
    inbox.wait_for(lambda i: len(changes) == 1, "the user id change")
    assert world.problems.records == []
    by_field: dict[str, list[RawUpdate]] = {}
    for update in inbox.raw:
        by_field.setdefault(update.field, []).append(update)
    assert {name: len(updates) for name, updates in by_field.items()} == {
        "messaging_handovers": 2,
        "standby": 4,
        "messages": 1,
    }
    # pywa runs its handlers on worker threads: the updates are told apart by what they hold.
    standby = {
        next(k for k in ("messages", "message_echoes", "statuses") if k in u.value): u
        for u in by_field["standby"]
    }
    message = Message.from_update(wa, standby["messages"])
    assert (message.id, message.text, message.from_user.wa_id, message.from_user.bsuid) == (
        to_agent["wamids"]["message"],
        "Hi",
        TO,
        user_id,
    )
    echo = OutgoingMessage.from_update(wa, standby["message_echoes"])
    assert (echo.id, echo.text, echo.to_user.wa_id) == (to_agent["wamids"]["echo"], "Hello", TO)
    # The raw handler parsed each status with pywa's MessageStatus.
    assert sorted(s["status"] for s in inbox.of(echo.id)) == ["delivered", "sent"]
    handovers = {update.value["type"]: update.value for update in by_field["messaging_handovers"]}
    assert handovers.keys() == {"control_taken", "control_passed"}
    assert handovers["control_taken"]["sender"] == {"user_id": user_id, "phone_number": TO}
    [change] = changes
    assert (change.sys_type, change.new_user_id, change.old_wa_id) == (
        SystemType.USER_CHANGED_USER_ID,
        changed["user_id"],
        TO,
    )
