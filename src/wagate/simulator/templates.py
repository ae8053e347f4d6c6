"""The templates every simulated WhatsApp Business Account starts with, in Meta's listing shape.

Components are written the way ``GET /{waba_id}/message_templates`` returns them (upper-case types,
``example`` blocks). The set covers each case the gateway must handle: an AUTHENTICATION template with a
copy-code button, positional and NAMED parameters, a header variable with a dynamic URL button, DOCUMENT
and IMAGE headers, one name in two languages, templates that are not approved, and enough fillers that a
listing needs several pages at Meta's default page size of 25.
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

_VARIABLE = re.compile(r"\{\{\s*([A-Za-z0-9_]+)\s*\}\}")


def _otp_code() -> dict[str, Any]:
    return {
        "name": "otp_code",
        "language": "en",
        "status": "APPROVED",
        "category": "AUTHENTICATION",
        "parameter_format": "POSITIONAL",
        "components": [
            {"type": "BODY", "text": "{{1}} is your verification code.", "add_security_recommendation": True},
            {"type": "FOOTER", "text": "This code expires in 10 minutes.", "code_expiration_minutes": 10},
            {"type": "BUTTONS", "buttons": [{"type": "OTP", "otp_type": "COPY_CODE", "text": "Copy code"}]},
        ],
    }


def _order_update(language: str, text: str) -> dict[str, Any]:
    return {
        "name": "order_update",
        "language": language,
        "status": "APPROVED",
        "category": "UTILITY",
        "parameter_format": "POSITIONAL",
        "components": [{"type": "BODY", "text": text, "example": {"body_text": [["A-1001", "shipped"]]}}],
    }


def _spring_sale() -> dict[str, Any]:
    return {
        "name": "spring_sale",
        "language": "en",
        "status": "APPROVED",
        "category": "MARKETING",
        "parameter_format": "POSITIONAL",
        "components": [
            {
                "type": "HEADER",
                "format": "TEXT",
                "text": "Spring sale: {{1}}",
                "example": {"header_text": ["20% off"]},
            },
            {
                "type": "BODY",
                "text": "Everything in the shop is {{1}} off until Sunday.",
                "example": {"body_text": [["20%"]]},
            },
            {
                "type": "BUTTONS",
                "buttons": [
                    {
                        "type": "URL",
                        "text": "Shop now",
                        "url": "https://shop.example/{{1}}",
                        "example": ["https://shop.example/spring"],
                    }
                ],
            },
        ],
    }


def _welcome_named() -> dict[str, Any]:
    return {
        "name": "welcome_named",
        "language": "en",
        "status": "APPROVED",
        "category": "UTILITY",
        "parameter_format": "NAMED",
        "components": [
            {
                "type": "BODY",
                "text": "Hi {{first_name}}, your order {{order_id}} is ready",
                "example": {
                    "body_text_named_params": [
                        {"param_name": "first_name", "example": "Aysel"},
                        {"param_name": "order_id", "example": "A-1001"},
                    ]
                },
            }
        ],
    }


def _media_header(name: str, category: str, media_format: str, text: str, example: str) -> dict[str, Any]:
    """A template whose header is an IMAGE, VIDEO or DOCUMENT: each send gives the file's link."""
    return {
        "name": name,
        "language": "en",
        "status": "APPROVED",
        "category": category,
        "parameter_format": "POSITIONAL",
        "components": [
            {"type": "HEADER", "format": media_format, "example": {"header_handle": [example]}},
            {"type": "BODY", "text": text, "example": {"body_text": [["A-1001"]]}},
        ],
    }


def _plain(name: str, category: str, status: str, text: str) -> dict[str, Any]:
    return {
        "name": name,
        "language": "en",
        "status": status,
        "category": category,
        "parameter_format": "POSITIONAL",
        "components": [{"type": "BODY", "text": text}],
    }


def _build_seed() -> list[dict[str, Any]]:
    seed = [
        _otp_code(),
        _order_update("en", "Your order {{1}} is now {{2}}."),
        _order_update("az", "{{1}} nömrəli sifarişiniz artıq {{2}} vəziyyətindədir."),  # noqa: RUF001 - Azerbaijani dotless i
        _spring_sale(),
        _welcome_named(),
        _media_header(
            "invoice_ready",
            "UTILITY",
            "DOCUMENT",
            "Your invoice {{1}} is attached.",
            "4::YXBwbGljYXRpb24vcGRm",
        ),
        _media_header("event_ticket", "UTILITY", "IMAGE", "Your ticket for order {{1}}.", "4::aW1hZ2UvcG5n"),
        _plain("new_feature", "MARKETING", "PENDING", "Try our new feature today."),
        _plain("old_promo", "MARKETING", "REJECTED", "Last year's promotion."),
    ]
    seed.extend(_plain(f"filler_{n:03d}", "UTILITY", "APPROVED", f"Notice number {n}.") for n in range(1, 31))
    return seed


SEED_TEMPLATES: tuple[dict[str, Any], ...] = tuple(_build_seed())


def template_id(waba_id: str, name: str, language: str) -> str:
    """A stable, numeric-looking id (Meta's are numeric strings), unique per WABA, name and language."""
    digest = hashlib.sha256(f"{waba_id}/{name}/{language}".encode()).hexdigest()
    return str(int(digest[:13], 16))


def with_ids(waba_id: str, templates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Deep copies of ``templates`` that all carry an ``id``."""
    result = []
    for template in templates:
        item = copy.deepcopy(template)
        item.setdefault("parameter_format", "POSITIONAL")
        if not item.get("id"):
            item["id"] = template_id(waba_id, str(item.get("name")), str(item.get("language")))
        result.append(item)
    return result


def seed_for(waba_id: str) -> list[dict[str, Any]]:
    return with_ids(waba_id, list(SEED_TEMPLATES))


def variables(text: str) -> list[str]:
    """Distinct ``{{...}}`` names in order of first appearance ("1", "2" or "first_name")."""
    seen: list[str] = []
    for name in _VARIABLE.findall(text):
        if name not in seen:
            seen.append(name)
    return seen
