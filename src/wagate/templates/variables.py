"""What a send must supply for a template, and how supplied values become Cloud API components.

`variables` (API.md section 2) lists, in order: the body's variables by their own names ("1", "2" or
"first_name"), then a text header's as "header.<name>", then each URL button's dynamic part as
"button.<index>". An AUTHENTICATION template's copy-code / one-tap button repeats the code (body
variable 1) and is filled automatically, so it is not listed.
"""

from __future__ import annotations

import re
from typing import Any

from wagate.whatsapp.payloads import body_component, header_component, text_parameter, url_button_component

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_]+)\s*\}\}")
AUTHENTICATION = "AUTHENTICATION"
# The most characters of one parameter value: Meta's limit for a template's whole body.
MAX_PARAMETER_LENGTH = 1024


def _placeholders(text: str | None) -> list[str]:
    seen: list[str] = []
    for name in PLACEHOLDER.findall(text or ""):
        if name not in seen:
            seen.append(name)
    return seen


def template_variables(components: list[dict[str, Any]], category: str) -> list[str]:
    body: list[str] = []
    header: list[str] = []
    buttons: list[str] = []
    for component in components:
        kind = str(component.get("type", "")).upper()
        if kind == "BODY":
            body = _placeholders(component.get("text"))
        elif kind == "HEADER" and str(component.get("format", "TEXT")).upper() == "TEXT":
            header = [f"header.{name}" for name in _placeholders(component.get("text"))]
        elif kind == "BUTTONS" and category != AUTHENTICATION:
            for index, button in enumerate(component.get("buttons") or []):
                if str(button.get("type", "")).upper() == "URL" and _placeholders(button.get("url")):
                    buttons.append(f"button.{index}")
    return body + header + buttons


def send_components(
    *, variables: list[str], values: dict[str, str], category: str, parameter_format: str
) -> list[dict[str, Any]]:
    """Cloud API `template.components` for a send, from a value for every variable."""
    named = parameter_format.upper() == "NAMED"

    def parameter(variable: str) -> dict[str, Any]:
        name = variable.split(".", 1)[-1]
        return text_parameter(values[variable], name if named else None)

    body = [v for v in variables if "." not in v]
    header = [v for v in variables if v.startswith("header.")]
    components: list[dict[str, Any]] = []
    if header:
        components.append(header_component([parameter(v) for v in header]))
    if body:
        components.append(body_component([parameter(v) for v in body]))
    for variable in variables:
        if variable.startswith("button."):
            components.append(url_button_component(int(variable.split(".", 1)[1]), values[variable]))
    if category == AUTHENTICATION and body:
        # The copy-code button carries the code again (Meta rejects an OTP send without it).
        components.append(url_button_component(0, values[body[0]]))
    return components


def bind_parameters(variables: list[str], parameters: Any) -> dict[str, str] | str:
    """Map the request's `template.parameters` onto `variables`; a string says what is wrong."""
    if parameters is None:
        parameters = []
    if isinstance(parameters, list):
        if len(parameters) != len(variables):
            return (
                f"expected {len(variables)} values ({', '.join(variables) or 'none'}), got {len(parameters)}"
            )
        pairs = list(zip(variables, parameters, strict=True))
    elif isinstance(parameters, dict):
        missing = [v for v in variables if v not in parameters]
        unknown = [k for k in parameters if k not in variables]
        if missing or unknown:
            parts = []
            if missing:
                parts.append("missing " + ", ".join(missing))
            if unknown:
                parts.append("unknown " + ", ".join(str(k) for k in unknown))
            return "; ".join(parts) + f" (the template's variables: {', '.join(variables) or 'none'})"
        pairs = [(v, parameters[v]) for v in variables]
    else:
        return "must be a list or an object"
    values: dict[str, str] = {}
    for name, value in pairs:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return f"value for {name} must be a string or a number"
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            # JSON readers (ours included) turn such a number into a float: it would not read back.
            return f"value for {name} is too large a number; send it as a string"
        text = str(value)
        if not text.strip():
            return f"value for {name} must not be empty"
        if len(text) > MAX_PARAMETER_LENGTH:
            # Meta's limit for a template's whole body: a longer value can never be sent.
            return f"value for {name} is longer than {MAX_PARAMETER_LENGTH} characters"
        values[name] = text
    return values
