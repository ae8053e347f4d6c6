"""Checks a send request the way the Cloud API does, raising Meta's error codes and HTTP statuses.

Only what the gateway can get wrong is checked, but that part strictly: template existence and
approval, parameter counts per component, a media header's object (error 132012 when it is missing or of
another type), and the OTP button parameter of AUTHENTICATION templates (Meta rejects an
authentication template whose button lacks the code).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from wagate.simulator.customers import is_user_id
from wagate.simulator.templates import variables

MAX_TEXT_LENGTH = 4096
MAX_CALLBACK_DATA_LENGTH = 512


class GraphError(Exception):
    """An error the simulated Graph API answers with, in Meta's envelope."""

    def __init__(
        self,
        http_status: int,
        code: int,
        message: str,
        details: str | None = None,
        *,
        prefixed: bool = True,
        error_type: str = "OAuthException",
    ) -> None:
        self.http_status = http_status
        self.code = code
        self.message = f"(#{code}) {message}" if prefixed else message
        self.details = details
        self.error_type = error_type
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"message": self.message, "type": self.error_type, "code": self.code}
        if self.details is not None:
            error["error_data"] = {"messaging_product": "whatsapp", "details": self.details}
        error["fbtrace_id"] = "A" + secrets.token_urlsafe(16)
        return {"error": error}


def invalid_token() -> GraphError:
    return GraphError(401, 190, "Invalid OAuth access token - Cannot parse access token", prefixed=False)


def rate_limit_hit() -> GraphError:
    return GraphError(400, 130429, "Rate limit hit", "Cloud API message throughput has been reached.")


def server_error(http_status: int = 500) -> GraphError:
    return GraphError(http_status, 131000, "Something went wrong", "Something went wrong.")


def error_for_code(code: int) -> GraphError:
    """An error for ``fail_next``: HTTP status codes become that status, others a Meta error code."""
    if 500 <= code <= 599:
        return server_error(code)
    if code == 130429:
        return rate_limit_hit()
    if code == 190:
        return invalid_token()
    if code == 132001:
        return GraphError(404, 132001, "Template name does not exist in the translation")
    if code == 429:
        return GraphError(429, 4, "Application request limit reached")
    return GraphError(400, code, "Simulated failure", "Injected by the simulator's fail_next switch.")


def check_bearer(authorization: str | None, accepted: set[str] | None) -> None:
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise invalid_token()
    if accepted is not None and token not in accepted:
        raise invalid_token()


@dataclass(frozen=True, slots=True)
class ValidSend:
    """A send that passed the checks, addressed by ``to`` (``wa_id`` set) or by ``recipient``."""

    to: str | None  # "to" as sent
    wa_id: str | None  # its digits
    recipient: str | None  # the BSUID of a send by "recipient" (only when there is no "to")
    type: str
    biz_opaque_callback_data: str | None
    template: dict[str, Any] | None


def _invalid(message: str, details: str | None = None, code: int = 100) -> GraphError:
    return GraphError(400, code, message, details)


def validate_send(body: Any, templates: list[dict[str, Any]]) -> ValidSend:
    if not isinstance(body, dict):
        raise _invalid("Invalid parameter", "Request body must be a JSON object.")
    if body.get("messaging_product") != "whatsapp":
        raise _invalid("The parameter messaging_product is required.", "messaging_product must be whatsapp")
    recipient_type = body.get("recipient_type", "individual")
    if recipient_type != "individual":
        raise _invalid("Invalid parameter", "recipient_type must be individual")
    to, wa_id, recipient = _addressee(body)
    callback = body.get("biz_opaque_callback_data")
    if callback is not None and (not isinstance(callback, str) or len(callback) > MAX_CALLBACK_DATA_LENGTH):
        raise _invalid(
            "Invalid parameter", "biz_opaque_callback_data must be a string of at most 512 characters"
        )
    kind = body.get("type", "text")
    template: dict[str, Any] | None = None
    if kind == "text":
        _check_text(body.get("text"))
    elif kind == "template":
        template = _check_template(body.get("template"), templates)
    else:
        raise _invalid("Invalid parameter", f"type {kind!r} is not supported by the simulator")
    if (
        recipient is not None
        and template is not None
        and str(template.get("category")).upper() == ("AUTHENTICATION")
    ):
        # Meta: one-tap, zero-tap and copy-code authentication templates still need a phone number.
        raise _invalid(
            "Business-scoped User ID recipients are not supported for this message.",
            "Authentication templates must be sent to a phone number.",
            code=131062,
        )
    return ValidSend(
        to=to,
        wa_id=wa_id,
        recipient=recipient,
        type=str(kind),
        biz_opaque_callback_data=callback,
        template=template,
    )


def _addressee(body: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(to, its digits, recipient): "to" wins when both are sent, as at Meta."""
    to = body.get("to")
    if to is not None:
        wa_id = to.strip().removeprefix("+") if isinstance(to, str) else ""
        if not (wa_id.isdigit() and 5 <= len(wa_id) <= 15):
            raise _invalid("Parameter value is not valid", "to: invalid phone number", code=131009)
        return str(to), wa_id, None
    recipient = body.get("recipient")
    if recipient is None:
        raise _invalid("The parameter to is required.", "Either to or recipient must be set.")
    if not (isinstance(recipient, str) and is_user_id(recipient.strip())):
        raise _invalid(
            "Parameter value is not valid", "recipient: invalid business-scoped user ID", code=131009
        )
    return None, None, recipient.strip()


def _check_text(text: Any) -> None:
    if not isinstance(text, dict) or not isinstance(text.get("body"), str):
        raise _invalid("The parameter text['body'] is required.")
    body = text["body"]
    if not body.strip():
        raise _invalid("Param text['body'] must be at least 1 character long.")
    if len(body) > MAX_TEXT_LENGTH:
        raise _invalid(f"Param text['body'] must be at most {MAX_TEXT_LENGTH} characters long.")


def _check_template(spec: Any, templates: list[dict[str, Any]]) -> dict[str, Any]:
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise _invalid("The parameter template['name'] is required.", code=131008)
    language = spec.get("language")
    code = language.get("code") if isinstance(language, dict) else None
    if not isinstance(code, str) or not code:
        raise _invalid("The parameter template['language']['code'] is required.", code=131008)
    name = spec["name"]
    record = next((t for t in templates if t.get("name") == name and t.get("language") == code), None)
    if record is None:
        raise GraphError(
            404,
            132001,
            "Template name does not exist in the translation",
            f"template name ({name}) does not exist in {code}",
        )
    status = str(record.get("status", "")).upper()
    if status == "PAUSED":
        raise GraphError(400, 132015, "Template is Paused", f"template name ({name}) is paused")
    if status == "DISABLED":
        raise GraphError(400, 132016, "Template is disabled", f"template name ({name}) is disabled")
    if status != "APPROVED":
        # Meta treats a translation that is not approved as absent.
        raise GraphError(
            404,
            132001,
            "Template name does not exist in the translation",
            f"template name ({name}) does not exist in {code}",
        )
    components = spec.get("components", [])
    if not isinstance(components, list) or not all(isinstance(c, dict) for c in components):
        raise _invalid("Invalid parameter", "template['components'] must be a list of objects")
    _check_components(record, components)
    return record


MEDIA_FORMATS = ("IMAGE", "VIDEO", "DOCUMENT")


def _media_format(record: dict[str, Any]) -> str | None:
    for component in record.get("components", []):
        if str(component.get("type", "")).upper() == "HEADER":
            shape = str(component.get("format", "TEXT")).upper()
            return shape if shape in MEDIA_FORMATS else None
    return None


def _check_media_header(media_format: str | None, header: dict[str, Any] | None) -> None:
    """A media header's one parameter, as Meta takes it: `{"type": "document", "document": {"link",
    "filename"?}}` (image and video alike, without a filename); error 132012 otherwise."""
    if media_format is None:
        return
    kind = media_format.lower()
    parameters = header.get("parameters") if header else None

    def mismatch(details: str) -> GraphError:
        return _invalid("Parameter format does not match format in the created template", details, 132012)

    if not isinstance(parameters, list) or len(parameters) != 1 or not isinstance(parameters[0], dict):
        raise mismatch(f"header: format mismatch, expected {kind}, received none")
    parameter = parameters[0]
    media = parameter.get(kind)
    if parameter.get("type") != kind or not isinstance(media, dict):
        raise mismatch(f"header: format mismatch, expected {kind}, received {parameter.get('type')}")
    link, media_id = media.get("link"), media.get("id")
    if media_id is None and not (isinstance(link, str) and link.startswith("https://")):
        raise mismatch(f"header: {kind}.link must be an https URL or {kind}.id a media id")
    if "filename" in media and (kind != "document" or not isinstance(media["filename"], str)):
        raise mismatch("header: filename is taken for documents only, as a string")


def _record_parts(record: dict[str, Any]) -> tuple[list[str], list[str], list[int]]:
    """(body variables, header variables, indexes of buttons that need a parameter)."""
    body_vars: list[str] = []
    header_vars: list[str] = []
    buttons_needing_parameter: list[int] = []
    for component in record.get("components", []):
        kind = str(component.get("type", "")).upper()
        if kind == "BODY":
            body_vars = variables(str(component.get("text", "")))
        elif kind == "HEADER" and str(component.get("format", "TEXT")).upper() == "TEXT":
            header_vars = variables(str(component.get("text", "")))
        elif kind == "BUTTONS":
            for index, button in enumerate(component.get("buttons", [])):
                button_type = str(button.get("type", "")).upper()
                if (button_type == "OTP" and str(button.get("otp_type", "")).upper() != "ZERO_TAP") or (
                    button_type == "URL" and variables(str(button.get("url", "")))
                ):
                    buttons_needing_parameter.append(index)
    return body_vars, header_vars, buttons_needing_parameter


def _check_parameters(where: str, expected: list[str], parameters: Any, named: bool) -> None:
    if not isinstance(parameters, list):
        parameters = []
    if len(parameters) != len(expected):
        raise _invalid(
            "Number of parameters does not match the expected number of params",
            f"{where}: number of localizable_params ({len(parameters)}) does not match the expected "
            f"number of params ({len(expected)})",
            code=132000,
        )
    for parameter in parameters:
        if not isinstance(parameter, dict) or not isinstance(parameter.get("type"), str):
            raise _invalid(
                "Required parameter is missing", f"{where}: parameter type is required", code=131008
            )
        if parameter["type"] == "text" and not (
            isinstance(parameter.get("text"), str) and parameter["text"].strip()
        ):
            raise _invalid(
                "Required parameter is missing", f"{where}: parameter text is required", code=131008
            )
    if named:
        names = [p.get("parameter_name") for p in parameters]
        if sorted(str(n) for n in names) != sorted(expected):
            raise _invalid(
                "Parameter name is missing or invalid",
                f"{where}: expected parameter names {expected}, got {names}",
                code=131008,
            )


def _check_components(record: dict[str, Any], components: list[dict[str, Any]]) -> None:
    body_vars, header_vars, needing = _record_parts(record)
    named = str(record.get("parameter_format", "POSITIONAL")).upper() == "NAMED"
    by_type: dict[str, dict[str, Any]] = {}
    buttons: dict[int, dict[str, Any]] = {}
    for component in components:
        kind = str(component.get("type", "")).lower()
        if kind == "button":
            try:
                index = int(component.get("index", -1))
            except (TypeError, ValueError):
                index = -1
            if index < 0:
                raise _invalid("Invalid parameter", "button: index must be a number", code=131009)
            buttons[index] = component
        else:
            by_type[kind] = component
    _check_parameters("body", body_vars, by_type.get("body", {}).get("parameters"), named)
    media_format = _media_format(record)
    if media_format is not None:
        _check_media_header(media_format, by_type.get("header"))
    else:
        _check_parameters("header", header_vars, by_type.get("header", {}).get("parameters"), named)
    for index in needing:
        button = buttons.pop(index, None)
        params = button.get("parameters") if button else None
        if (
            button is None
            or str(button.get("sub_type", "")).lower() != "url"
            or not isinstance(params, list)
            or len(params) != 1
        ):
            raise _invalid(
                "Required parameter is missing",
                f"buttons: Button at index {index} of type Url requires a parameter",
                code=131008,
            )
        _check_parameters(f"button {index}", ["1"], params, named=False)
    if buttons:
        index = min(buttons)
        raise _invalid(
            "Parameter value is not valid", f"buttons: Button at index {index} takes no parameter", 131009
        )
