"""Template variables (API.md section 2) and the components a send carries, on Meta's template shapes."""

from __future__ import annotations

import pytest
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


def test_a_media_header_is_the_variable_header_first() -> None:
    # API.md section 14: a media header takes its link as the variable "header", listed first.
    components = [{"type": "HEADER", "format": "IMAGE"}, {"type": "BODY", "text": "Hello {{1}}"}]
    assert template_variables(components, "UTILITY") == ["header", "1"]
    assert template_variables([{"type": "HEADER", "format": "LOCATION"}], "UTILITY") == []


def test_a_document_header_goes_out_in_metas_shape() -> None:
    variables = ["header", "1"]
    values = bind_parameters(
        variables,
        [{"link": "https://files.example/i.pdf", "filename": "invoice-1001.pdf"}, "A-1001"],
        "DOCUMENT",
    )
    assert not isinstance(values, str)
    components = send_components(
        variables=variables,
        values=values,
        category="UTILITY",
        parameter_format="POSITIONAL",
        media_format="DOCUMENT",
    )
    assert components[0] == {
        "type": "header",
        "parameters": [
            {
                "type": "document",
                "document": {"link": "https://files.example/i.pdf", "filename": "invoice-1001.pdf"},
            }
        ],
    }
    assert components[1] == {"type": "body", "parameters": [{"type": "text", "text": "A-1001"}]}


@pytest.mark.parametrize(
    ("header", "media_format", "issue"),
    [
        ("https://files.example/i.pdf", "DOCUMENT", "must be an object"),
        ({"link": "http://files.example/i.pdf"}, "DOCUMENT", "must be an https URL"),
        ({"link": ""}, "IMAGE", "https URL of the file"),
        ({"link": "https://files.example/a.png", "filename": "a.png"}, "IMAGE", "DOCUMENT headers only"),
        ({"link": "https://files.example/i.pdf", "filename": "../etc/passwd"}, "DOCUMENT", "without a path"),
        ({"link": "https://files.example/i.pdf", "caption": "x"}, "DOCUMENT", "not caption"),
    ],
)
def test_a_media_header_value_is_checked(header: object, media_format: str, issue: str) -> None:
    assert issue in str(bind_parameters(["header"], {"header": header}, media_format))


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
