"""Template variables (API.md section 2) and the components a send carries, on Meta's template shapes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wagate.templates.variables import bind_parameters, send_components, template_variables

AUTH_AS_LISTED_BY_META = [
    {"type": "BODY", "text": "*{{1}}* is your verification code.", "add_security_recommendation": True},
    {"type": "FOOTER", "text": "This code expires in 10 minutes."},
    {
        "type": "BUTTONS",
        "buttons": [
            {
                "type": "URL",
                "text": "Copy code",
                "url": "https://www.whatsapp.com/otp/code/?otp_type=COPY_CODE&code=otp{{1}}",
            }
        ],
    },
]
MARKETING = [
    {"type": "HEADER", "format": "TEXT", "text": "Hi {{1}}"},
    {"type": "BODY", "text": "Take {{1}} off until {{2}}. Again: {{1}}."},
    {
        "type": "BUTTONS",
        "buttons": [
            {"type": "QUICK_REPLY", "text": "Stop"},
            {"type": "URL", "text": "Shop", "url": "https://x.example/{{1}}"},
        ],
    },
]


def test_authentication_buttons_are_filled_from_the_code() -> None:
    assert template_variables(AUTH_AS_LISTED_BY_META, "AUTHENTICATION") == ["1"]
    components = send_components(
        variables=["1"], values={"1": "4821"}, category="AUTHENTICATION", parameter_format="POSITIONAL"
    )
    assert components == [
        {"type": "body", "parameters": [{"type": "text", "text": "4821"}]},
        {"type": "button", "sub_type": "url", "index": "0", "parameters": [{"type": "text", "text": "4821"}]},
    ]


def test_header_body_and_url_button_variables_in_order() -> None:
    variables = template_variables(MARKETING, "MARKETING")
    assert variables == ["1", "2", "header.1", "button.1"]
    values = bind_parameters(variables, ["20%", "Friday", "Ann", "spring"])
    assert values == {"1": "20%", "2": "Friday", "header.1": "Ann", "button.1": "spring"}
    components = send_components(
        variables=variables, values=values, category="MARKETING", parameter_format="POSITIONAL"
    )
    assert components[0] == {"type": "header", "parameters": [{"type": "text", "text": "Ann"}]}
    assert components[1]["parameters"] == [
        {"type": "text", "text": "20%"},
        {"type": "text", "text": "Friday"},
    ]
    assert components[2] == {
        "type": "button",
        "sub_type": "url",
        "index": "1",
        "parameters": [{"type": "text", "text": "spring"}],
    }


def test_a_media_header_has_no_text_variable() -> None:
    components = [{"type": "HEADER", "format": "IMAGE"}, {"type": "BODY", "text": "Hello"}]
    assert template_variables(components, "UTILITY") == []


def test_binding_reports_what_is_wrong() -> None:
    assert bind_parameters(["1", "2"], ["a"]) == "expected 2 values (1, 2), got 1"
    assert "missing 2" in str(bind_parameters(["1", "2"], {"1": "a"}))
    assert "unknown x" in str(bind_parameters(["1"], {"1": "a", "x": "b"}))
    assert bind_parameters(["1"], [{"nested": 1}]) == "value for 1 must be a string or a number"
    assert bind_parameters(["1"], [True]) == "value for 1 must be a string or a number"
    assert bind_parameters([], None) == {}
    assert bind_parameters(["1"], [7]) == {"1": "7"}


@given(st.lists(st.text(min_size=1).filter(str.strip), min_size=0, max_size=5))
def test_any_list_of_the_right_length_binds_in_order(values: list[str]) -> None:
    variables = [str(i + 1) for i in range(len(values))]
    assert bind_parameters(variables, values) == dict(zip(variables, values, strict=True))
