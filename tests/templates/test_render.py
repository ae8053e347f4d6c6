"""What a customer sees of a template message, rendered from the simulator's seeded templates (Meta's
listing shape) and the parameters a message was sent with."""

from __future__ import annotations

from typing import Any

from wagate.simulator.templates import SEED_TEMPLATES
from wagate.templates.render import RenderedTemplate, render_message_template, render_template_text
from wagate.templates.variables import template_variables


def seeded(name: str, language: str = "en") -> dict[str, Any]:
    return next(t for t in SEED_TEMPLATES if t["name"] == name and t["language"] == language)


def variables_of(template: dict[str, Any]) -> list[str]:
    return template_variables(template["components"], template["category"])


def test_authentication_template_shows_the_code_footer_and_copy_button() -> None:
    otp = seeded("otp_code")
    assert variables_of(otp) == ["1"]
    assert render_message_template(otp["components"], ["1"], ["4821"]) == RenderedTemplate(
        header=None,
        body="4821 is your verification code.",
        footer="This code expires in 10 minutes.",
        buttons=["Copy code"],
    )


def test_utility_template_from_a_list_and_from_an_object() -> None:
    for language, parameters, body in [
        ("en", ["A-1001", "shipped"], "Your order A-1001 is now shipped."),
        (
            "az",
            {"2": "göndərilib", "1": "A-1001"},
            "A-1001 nömrəli sifarişiniz artıq göndərilib vəziyyətindədir.",  # noqa: RUF001 - dotless i
        ),
    ]:
        template = seeded("order_update", language)
        rendered = render_message_template(template["components"], variables_of(template), parameters)
        assert rendered == RenderedTemplate(header=None, body=body, footer=None, buttons=[])


def test_marketing_template_fills_header_body_and_the_url_button() -> None:
    sale = seeded("spring_sale")
    variables = variables_of(sale)
    assert variables == ["1", "header.1", "button.0"]
    rendered = render_message_template(sale["components"], variables, ["20%", "20% off", "spring"])
    assert rendered == RenderedTemplate(
        header="Spring sale: 20% off",
        body="Everything in the shop is 20% off until Sunday.",
        footer=None,
        buttons=["Shop now (https://shop.example/spring)"],
    )
    by_name = render_message_template(
        sale["components"], variables, {"button.0": "spring", "header.1": "20% off", "1": "20%"}
    )
    assert by_name == rendered


def test_named_template() -> None:
    welcome = seeded("welcome_named")
    variables = variables_of(welcome)
    assert variables == ["first_name", "order_id"]
    rendered = render_message_template(
        welcome["components"], variables, {"first_name": "Aysel", "order_id": "A-1001"}
    )
    assert rendered is not None
    assert rendered.body == "Hi Aysel, your order A-1001 is ready"
    in_order = render_message_template(welcome["components"], variables, ["Aysel", "A-1001"])
    assert in_order == rendered


def test_missing_values_render_as_the_placeholder() -> None:
    sale = seeded("spring_sale")
    rendered = render_template_text(sale["components"], {"1": "20%"})
    assert rendered.header == "Spring sale: {{1}}"
    assert rendered.body == "Everything in the shop is 20% off until Sunday."
    assert rendered.buttons == ["Shop now (https://shop.example/{{1}})"]
    welcome = render_template_text(seeded("welcome_named")["components"], {"order_id": "A-7"})
    assert welcome.body == "Hi {{first_name}}, your order A-7 is ready"


def test_parameters_that_no_longer_fit_give_none() -> None:
    order = seeded("order_update")
    variables = variables_of(order)
    assert render_message_template(order["components"], variables, ["A-1001"]) is None
    assert render_message_template(order["components"], variables, {"1": "A-1001", "3": "x"}) is None
    assert render_message_template(order["components"], variables, "A-1001") is None
    assert render_message_template(order["components"], variables, None) is None


def test_a_template_without_variables_renders_with_no_parameters() -> None:
    filler = seeded("filler_001")
    assert variables_of(filler) == []
    rendered = render_message_template(filler["components"], [], None)
    assert rendered == RenderedTemplate(header=None, body="Notice number 1.", footer=None, buttons=[])


def test_values_are_put_in_literally() -> None:
    components = [{"type": "BODY", "text": "{{1}} and {{2}} and {{ 1 }}"}]
    rendered = render_template_text(components, {"1": "{{2}}", "2": r"\1 $0 \g<0>"})
    assert rendered.body == r"{{2}} and \1 $0 \g<0> and {{2}}"


def test_media_header_other_buttons_and_the_otp_url_button_as_meta_lists_it() -> None:
    components: list[dict[str, Any]] = [
        {"type": "HEADER", "format": "IMAGE", "example": {"header_handle": ["https://x.example/h"]}},
        {"type": "BODY", "text": "*{{1}}* is your verification code."},
        {
            "type": "BUTTONS",
            "buttons": [
                {
                    "type": "URL",
                    "text": "Copy code",
                    "url": "https://www.whatsapp.com/otp/code/?otp_type=COPY_CODE&code=otp{{1}}",
                },
                {"type": "QUICK_REPLY", "text": "Stop"},
                {"type": "PHONE_NUMBER", "text": "Call us", "phone_number": "+15550001111"},
                {"type": "URL", "text": "Site", "url": "https://static.example/"},
            ],
        },
    ]
    rendered = render_template_text(components, {"1": "4821"})
    assert rendered == RenderedTemplate(
        header="[image]",
        body="*4821* is your verification code.",
        footer=None,
        buttons=["Copy code", "Stop", "Call us", "Site (https://static.example/)"],
    )
