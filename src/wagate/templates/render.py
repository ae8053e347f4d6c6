"""The text a customer sees for a template message: its components with the placeholders filled in.

Components are the template's, as Meta lists them (``Template.components``: upper-case ``type``, a
``HEADER`` with a ``format``, ``BODY``, ``FOOTER``, ``BUTTONS``). Values are keyed the way
:mod:`wagate.templates.variables` names the template's variables: the body's by their own names ("1",
"2" or "first_name" for NAMED templates), a text header's as "header.<name>", a URL button's dynamic
part as "button.<index>" (its place among the template's buttons).

What is rendered:

- ``header``: a text header with its placeholders filled; a media header (image, video, document,
  location) as ``[image]`` and so on, since it carries no text; ``None`` without a header.
- ``body``: the body with its placeholders filled (``""`` if a template had none).
- ``footer``: the footer's text (footers take no variables); ``None`` without one.
- ``buttons``: each button's label; a URL button also shows where it leads, with its dynamic part filled
  in: ``"Shop now (https://shop.example/spring)"``. An authentication template's copy-code or one-tap
  button shows its label only: Meta fills it with the code itself.

A placeholder without a value stays as written (``{{1}}``), so a preview shows what is still missing.
Values are put in as they are: a value that itself looks like a placeholder is not filled again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wagate.templates.variables import PLACEHOLDER, MediaHeader, Value, bind_parameters, header_format

# Meta lists an authentication template's copy-code button as a URL button to this address.
_OTP_URL_PREFIX = "https://www.whatsapp.com/otp/"


@dataclass(frozen=True)
class RenderedTemplate:
    header: str | None
    body: str
    footer: str | None
    buttons: list[str] = field(default_factory=list)


def _fill(text: str, value_for: Callable[[str], str | None]) -> str:
    """``text`` with each ``{{name}}`` replaced by ``value_for(name)``, left as written where that is None."""

    def replace(match: re.Match[str]) -> str:
        value = value_for(match.group(1))
        return match.group(0) if value is None else value

    return PLACEHOLDER.sub(replace, text)


def _text(component: dict[str, Any], key: str = "text") -> str:
    value = component.get(key)
    return value if isinstance(value, str) else ""


def _text_of(values: dict[str, Value], key: str) -> str | None:
    value = values.get(key)
    return value if isinstance(value, str) else None


def _button(index: int, button: dict[str, Any], values: dict[str, Value]) -> str | None:
    if not isinstance(button, dict):
        return None
    label = _text(button)
    kind = str(button.get("type", "")).upper()
    url = _text(button, "url")
    if kind != "URL" or not url or url.startswith(_OTP_URL_PREFIX):
        return label or None
    value = _text_of(values, f"button.{index}")
    filled = _fill(url, lambda _name: value)
    return f"{label} ({filled})" if label else filled


def render_template_text(components: list[dict[str, Any]], values: dict[str, Value]) -> RenderedTemplate:
    """The header, body, footer and button labels of a template with ``values`` put in."""
    header: str | None = None
    body = ""
    footer: str | None = None
    buttons: list[str] = []
    for component in components:
        if not isinstance(component, dict):
            continue
        kind = str(component.get("type", "")).upper()
        if kind == "HEADER":
            shape = str(component.get("format", "TEXT")).upper()
            if shape == "TEXT":
                header = _fill(_text(component), lambda name: _text_of(values, f"header.{name}"))
            else:
                header = _media_header(shape, values.get("header"))
        elif kind == "BODY":
            body = _fill(_text(component), lambda name: _text_of(values, name))
        elif kind == "FOOTER":
            footer = _text(component) or None
        elif kind == "BUTTONS":
            for index, button in enumerate(component.get("buttons") or []):
                shown = _button(index, button, values)
                if shown is not None:
                    buttons.append(shown)
    return RenderedTemplate(header=header, body=body, footer=footer, buttons=buttons)


def _media_header(media_format: str, value: Value | None) -> str:
    """A media header as text: its kind, and the file's name or link when the send gave one."""
    if isinstance(value, MediaHeader):
        return f"[{media_format.lower()}: {value.filename or value.link}]"
    return f"[{media_format.lower()}]"


def render_message_template(
    template_components: list[dict[str, Any]], variables: list[str], parameters: Any
) -> RenderedTemplate | None:
    """A sent template message as its customer saw it, from the parameters stored with the message
    (``Message.template_parameters``: a list in ``variables`` order or an object keyed by them).

    ``None`` when the parameters do not fit ``variables`` (the template changed since the send)."""
    values = bind_parameters(variables, parameters, header_format(template_components))
    if isinstance(values, str):
        return None
    return render_template_text(template_components, values)


def message_template_text(
    template_components: list[dict[str, Any]], variables: list[str], parameters: Any
) -> str | None:
    """A sent template message as plain text, as its customer saw it: the header, body and footer
    (`render_message_template`), one to a line, those without text left out; buttons are not text.
    What the dashboard's thread and bulk preview show and the API's dry run returns as `preview`.

    ``None`` when the parameters do not fit ``variables`` (the template changed since the send)."""
    shown = render_message_template(template_components, variables, parameters)
    if shown is None:
        return None
    return "\n".join(part for part in (shown.header, shown.body, shown.footer) if part)
