"""What a send must supply for a template, and how supplied values become Cloud API components.

`variables` (API.md section 2) lists, in order: a media header's link as "header" (API.md section 14),
the body's variables by their own names ("1", "2" or "first_name"), then a text header's as
"header.<name>", then each URL button's dynamic part as "button.<index>". An AUTHENTICATION template's
copy-code / one-tap button repeats the code (body variable 1) and is filled automatically, so it is
not listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from wagate.whatsapp.outbound import (
    body_component,
    header_component,
    media_parameter,
    text_parameter,
    url_button_component,
)

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_]+)\s*\}\}")
AUTHENTICATION = "AUTHENTICATION"
# The most characters of one parameter value: Meta's limit for a template's whole body.
MAX_PARAMETER_LENGTH = 1024
# A media header (IMAGE, VIDEO, DOCUMENT) is one variable of its own: the link Meta fetches the file from.
MEDIA_HEADER = "header"
MEDIA_HEADER_FORMATS = ("IMAGE", "VIDEO", "DOCUMENT")
MAX_LINK_LENGTH = 2048
# Meta shows a document's file name to the customer; 240 keeps it within common file-system limits.
MAX_FILENAME_LENGTH = 240


@dataclass(frozen=True, slots=True)
class MediaHeader:
    """The value of a media header: an https link to a public file (`filename` for documents only)."""

    link: str
    filename: str | None = None


# A bound value: text for every variable but a media header.
Value = str | MediaHeader


def header_format(components: list[dict[str, Any]]) -> str | None:
    """The format of the template's header (TEXT, IMAGE, VIDEO, DOCUMENT, LOCATION), None without one."""
    for component in components:
        if isinstance(component, dict) and str(component.get("type", "")).upper() == "HEADER":
            return str(component.get("format") or "TEXT").upper()
    return None


def _placeholders(text: str | None) -> list[str]:
    seen: list[str] = []
    for name in PLACEHOLDER.findall(text or ""):
        if name not in seen:
            seen.append(name)
    return seen


def template_variables(components: list[dict[str, Any]], category: str) -> list[str]:
    media = [MEDIA_HEADER] if header_format(components) in MEDIA_HEADER_FORMATS else []
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
    return media + body + header + buttons


def _text(values: dict[str, Value], variable: str) -> str:
    value = values[variable]
    assert isinstance(value, str)  # bind_parameters gave text to every variable but a media header
    return value


def send_components(
    *,
    variables: list[str],
    values: dict[str, Value],
    category: str,
    parameter_format: str,
    media_format: str | None = None,
) -> list[dict[str, Any]]:
    """Cloud API `template.components` for a send, from a value for every variable. `media_format`:
    the template's header format when it is a media header (IMAGE, VIDEO, DOCUMENT)."""
    named = parameter_format.upper() == "NAMED"

    def parameter(variable: str) -> dict[str, Any]:
        name = variable.split(".", 1)[-1]
        return text_parameter(_text(values, variable), name if named else None)

    body = [v for v in variables if "." not in v and v != MEDIA_HEADER]
    header = [v for v in variables if v.startswith("header.")]
    components: list[dict[str, Any]] = []
    media = values.get(MEDIA_HEADER)
    if isinstance(media, MediaHeader) and media_format is not None:
        components.append(header_component([media_parameter(media_format, media.link, media.filename)]))
    if header:
        components.append(header_component([parameter(v) for v in header]))
    if body:
        components.append(body_component([parameter(v) for v in body]))
    for variable in variables:
        if variable.startswith("button."):
            components.append(url_button_component(int(variable.split(".", 1)[1]), _text(values, variable)))
    if category == AUTHENTICATION and body:
        # The copy-code button carries the code again (Meta rejects an OTP send without it).
        components.append(url_button_component(0, _text(values, body[0])))
    return components


def media_header(value: Any, media_format: str | None) -> MediaHeader | str:
    """A media header's value checked for its shape (the link's address is checked by the caller, which
    may resolve it): `{"link": "https://...", "filename": "..."}`; a string says what is wrong."""
    if not isinstance(value, dict):
        return 'value for header must be an object like {"link": "https://..."}'
    unknown = sorted(str(key) for key in value if key not in ("link", "filename"))
    if unknown:
        return f"header takes link and filename, not {', '.join(unknown)}"
    link = value.get("link")
    if not isinstance(link, str) or not link.strip():
        return "header.link must be the https URL of the file"
    if len(link) > MAX_LINK_LENGTH:
        return f"header.link is longer than {MAX_LINK_LENGTH} characters"
    try:
        scheme = urlsplit(link).scheme
    except ValueError:
        scheme = ""
    if scheme != "https":
        return "header.link must be an https URL (Meta fetches the file from it)"
    filename = value.get("filename")
    if filename is not None:
        if media_format != "DOCUMENT":
            return f"header.filename is for DOCUMENT headers only; this template's header is {media_format}"
        if not isinstance(filename, str) or not filename.strip() or len(filename) > MAX_FILENAME_LENGTH:
            return f"header.filename must be a name of 1 to {MAX_FILENAME_LENGTH} characters"
        if any(c in filename for c in "/\\") or any(ord(c) < 32 for c in filename):
            return "header.filename must be a file name, without a path or control characters"
    return MediaHeader(link, filename)


def bind_parameters(
    variables: list[str], parameters: Any, media_format: str | None = None
) -> dict[str, Value] | str:
    """Map the request's `template.parameters` onto `variables`; a string says what is wrong.
    `media_format`: the template's media header format, when it has one (its value's rules)."""
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
    values: dict[str, Value] = {}
    for name, value in pairs:
        if name == MEDIA_HEADER:
            media = media_header(value, media_format)
            if isinstance(media, str):
                return media
            values[name] = media
            continue
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
