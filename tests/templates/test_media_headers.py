"""API.md section 14: media header templates and authentication templates that need a phone number,
end to end over HTTP with the simulator, on both databases."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from support.app_in_thread import sql
from support.harness import Gateway, new_number, sim_customer, wait_for

# A public address literal: the guard needs no DNS for it, and nothing is ever fetched from it.
PUBLIC_FILE = "https://93.184.215.14/invoices/1001.pdf"
INVOICE = "invoice_ready"  # the simulator's UTILITY template with a DOCUMENT header
TICKET = "event_ticket"  # its UTILITY template with an IMAGE header


def invoice(header: Any, number: str = "A-1001", *, as_list: bool = False) -> dict[str, Any]:
    parameters: Any = [header, number] if as_list else {"header": header, "1": number}
    return {"name": INVOICE, "language": "en", "parameters": parameters}


def send_template(gateway: Gateway, template: dict[str, Any], **body: Any) -> Any:
    return gateway.send(
        {"phone_number": body.pop("phone_number", None) or new_number(), "template": template, **body}
    )


def error_of(response: Any) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def test_templates_list_the_media_header_first_with_its_format(gateway: Gateway) -> None:
    response = gateway.http.get(
        gateway.v1("/whatsapp/templates"), params={"name": INVOICE}, headers=gateway.headers()
    )
    assert response.status_code == 200, response.text
    [item] = [t for t in response.json()["data"] if t["channel_id"] == gateway.ids["main"]]
    assert item["header_format"] == "DOCUMENT"
    assert item["variables"] == ["header", "1"]
    otp = gateway.http.get(
        gateway.v1("/whatsapp/templates"), params={"name": "otp_code"}, headers=gateway.headers()
    ).json()["data"][0]
    assert otp["header_format"] is None
    sale = gateway.http.get(
        gateway.v1("/whatsapp/templates"), params={"name": "spring_sale"}, headers=gateway.headers()
    ).json()["data"][0]
    assert sale["header_format"] == "TEXT"


@pytest.mark.parametrize("as_list", [False, True])
def test_a_document_header_reaches_meta_with_its_link_and_filename(gateway: Gateway, as_list: bool) -> None:
    number = new_number()
    header = {"link": PUBLIC_FILE, "filename": "invoice-1001.pdf"}
    response = send_template(gateway, invoice(header, as_list=as_list), phone_number=number)
    assert response.status_code == 201, response.text
    [request] = wait_for(lambda: gateway.sim.messages(to=number), what="the invoice at the simulator")
    components = request["body"]["template"]["components"]
    assert components[0] == {
        "type": "header",
        "parameters": [
            {"type": "document", "document": {"link": PUBLIC_FILE, "filename": "invoice-1001.pdf"}}
        ],
    }
    assert {"type": "body", "parameters": [{"type": "text", "text": "A-1001"}]} in components
    # The simulator checks the header as Meta does (132012 otherwise): the send goes on to delivered.
    message = gateway.wait_status(response.json()["id"], "delivered")
    assert message["template"]["parameters"] == invoice(header, as_list=as_list)["parameters"]
    assert message["cost"]["category"] == "UTILITY"


def test_an_image_header_goes_without_a_filename(gateway: Gateway) -> None:
    number = new_number()
    link = "https://93.184.215.14/tickets/7.png"
    template = {"name": TICKET, "language": "en", "parameters": {"header": {"link": link}, "1": "T-7"}}
    response = send_template(gateway, template, phone_number=number)
    assert response.status_code == 201, response.text
    [request] = wait_for(lambda: gateway.sim.messages(to=number), what="the ticket at the simulator")
    header = request["body"]["template"]["components"][0]
    assert header == {"type": "header", "parameters": [{"type": "image", "image": {"link": link}}]}


@pytest.mark.parametrize(
    ("header", "issue"),
    [
        (None, "must be an object"),
        ({"link": "http://93.184.215.14/i.pdf"}, "https"),
        ({"link": "https://127.0.0.1/i.pdf"}, "public"),
        ({"link": "https://10.1.2.3/i.pdf"}, "public"),
        ({"link": "https://[::1]/i.pdf"}, "public"),
        ({"link": PUBLIC_FILE, "filename": "a/b.pdf"}, "without a path"),
    ],
)
def test_a_bad_header_link_is_refused_naming_the_header_before_anything_is_stored(
    gateway: Gateway, header: Any, issue: str
) -> None:
    number = new_number()
    error = error_of(send_template(gateway, invoice(header), phone_number=number))
    assert error["code"] == "template_parameters_mismatch"
    [detail] = error["details"]
    assert detail["field"].startswith("template.parameters")
    assert "header" in detail["field"] + detail["issue"] and issue in detail["issue"]
    assert sql(gateway.database_url, "SELECT id FROM messages WHERE phone_number = :p", p=number) == []
    # The same in a dry run.
    dry = gateway.http.post(
        gateway.v1("/whatsapp/messages"),
        params={"dry_run": "true"},
        json={"channel_id": gateway.ids["main"], "phone_number": number, "template": invoice(header)},
        headers=gateway.headers(),
    )
    assert error_of(dry)["code"] == "template_parameters_mismatch"


def test_private_event_urls_allowed_do_not_open_header_links(delivering_gateway: Gateway) -> None:
    # This gateway allows private status_callback URLs; Meta still fetches the file from the internet.
    error = error_of(send_template(delivering_gateway, invoice({"link": "https://127.0.0.1/i.pdf"})))
    assert error["code"] == "template_parameters_mismatch"


def test_a_missing_header_is_a_parameter_mismatch(gateway: Gateway) -> None:
    error = error_of(send_template(gateway, {"name": INVOICE, "language": "en", "parameters": ["A-1001"]}))
    assert error["code"] == "template_parameters_mismatch"
    assert "header" in error["details"][0]["issue"]


def test_a_dry_run_previews_the_document(gateway: Gateway) -> None:
    header = {"link": PUBLIC_FILE, "filename": "invoice-1001.pdf"}
    response = gateway.http.post(
        gateway.v1("/whatsapp/messages"),
        params={"dry_run": "true"},
        json={"channel_id": gateway.ids["main"], "phone_number": new_number(), "template": invoice(header)},
        headers=gateway.headers(),
    )
    assert response.status_code == 200, response.text
    assert response.json()["preview"] == "[document: invoice-1001.pdf]\nYour invoice A-1001 is attached."


def test_a_batch_sends_each_recipient_its_own_document(gateway: Gateway) -> None:
    numbers = [new_number(), new_number()]
    recipients = [
        {"phone_number": number, "parameters": {"header": {"link": f"{PUBLIC_FILE}?n={i}"}, "1": f"A-{i}"}}
        for i, number in enumerate(numbers)
    ]
    body = {
        "channel_id": gateway.ids["main"],
        "template": {"name": INVOICE, "language": "en"},
        "recipients": recipients,
    }
    response = gateway.http.post(gateway.v1("/whatsapp/bulk_messages"), json=body, headers=gateway.headers())
    assert response.status_code == 202, response.text
    assert response.json()["accepted"] == 2
    for i, number in enumerate(numbers):
        [request] = wait_for(lambda n=number: gateway.sim.messages(to=n), what="each recipient's invoice")
        media = request["body"]["template"]["components"][0]["parameters"][0]["document"]
        assert media == {"link": f"{PUBLIC_FILE}?n={i}"}
    # One recipient with a private link refuses the whole batch, naming that recipient.
    recipients[1]["parameters"]["header"] = {"link": "https://192.168.1.5/x.pdf"}
    refused = gateway.http.post(gateway.v1("/whatsapp/bulk_messages"), json=body, headers=gateway.headers())
    error = error_of(refused)
    assert error["code"] == "template_parameters_mismatch"
    assert error["details"][0]["field"] == "recipients[1].parameters.header"


def stranger() -> str:
    return "AZ." + "".join(secrets.choice("0123456789") for _ in range(20))


def test_an_otp_to_a_customer_known_only_by_user_id_is_refused(gateway: Gateway) -> None:
    user_id = stranger()
    otp = {"name": "otp_code", "language": "en", "parameters": ["123456"]}
    body = {"channel_id": gateway.ids["main"], "user_id": user_id, "template": otp}
    error = error_of(gateway.send(body))
    assert error["code"] == "phone_number_required"
    assert error["details"] == [{"field": "user_id", "issue": "the customer's phone number is not known"}]
    dry = gateway.http.post(
        gateway.v1("/whatsapp/messages"), params={"dry_run": "true"}, json=body, headers=gateway.headers()
    )
    assert error_of(dry)["code"] == "phone_number_required"
    assert sql(gateway.database_url, "SELECT id FROM messages WHERE user_id = :u", u=user_id) == []
    # A fallback that is an authentication template is refused the same way when the window is closed.
    fallback = {"channel_id": gateway.ids["main"], "user_id": user_id, "text": "hi", "fallback_template": otp}
    assert error_of(gateway.send(fallback))["code"] == "phone_number_required"


def test_an_otp_by_user_id_goes_to_the_learned_number(gateway: Gateway) -> None:
    number = new_number()
    user_id = sim_customer(gateway, phone_number=number)["user_id"]
    # The gateway learns the pair from the statuses of a first send to the number.
    first = gateway.send(
        {
            "phone_number": number,
            "template": {"name": "order_update", "language": "en", "parameters": ["A-1", "shipped"]},
        }
    )
    assert first.status_code == 201, first.text
    wait_for(lambda: gateway.message(first.json()["id"])["user_id"] == user_id, what="the user id learned")
    otp = {"name": "otp_code", "language": "en", "parameters": ["777777"]}
    response = gateway.send({"user_id": user_id, "template": otp})
    assert response.status_code == 201, response.text
    requests = wait_for(lambda: len(sent := gateway.sim.messages(to=number)) >= 2 and sent, what="the OTP")
    assert requests[-1]["body"]["to"] == number.removeprefix("+")
    assert "recipient" not in requests[-1]["body"]
