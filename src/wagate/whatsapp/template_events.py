"""Meta's template lifecycle webhooks (API.md section 14), parsed once at the edge into frozen models.

They come on the WhatsApp Business Account's subscription with `entry[].id` = the WABA id and no
`metadata`: a status (`message_template_status_update`), a category (`template_category_update`) or a
quality rating (`message_template_quality_update`) of one template, named by `message_template_id`
and by name and language. Shapes as Meta's webhooks reference gives them (docs/simulator.md, "Which
Meta changes it follows"); values Meta may add later become UNKNOWN (or are kept as written, for
categories) instead of failing the body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

STATUS_FIELD = "message_template_status_update"
CATEGORY_FIELD = "template_category_update"
QUALITY_FIELD = "message_template_quality_update"
TEMPLATE_FIELDS = (STATUS_FIELD, CATEGORY_FIELD, QUALITY_FIELD)


class MalformedTemplateChange(ValueError):
    """A template change that cannot be read: kept for an operator, the rest of the body applies."""


class _Lenient(StrEnum):
    """Meta adds values without notice: one the gateway does not know yet is UNKNOWN, not an error."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if isinstance(value, str):
            upper = value.strip().upper()
            for member in cls:
                if member.value == upper:
                    return member
        return cls["UNKNOWN"]


class TemplateEvent(_Lenient):
    """`event` of a status update: what happened to the template (not always its new status)."""

    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    PAUSED = "PAUSED"
    DISABLED = "DISABLED"
    ARCHIVED = "ARCHIVED"
    UNARCHIVED = "UNARCHIVED"
    PENDING = "PENDING"
    PENDING_DELETION = "PENDING_DELETION"
    DELETED = "DELETED"
    IN_APPEAL = "IN_APPEAL"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    REINSTATED = "REINSTATED"
    FLAGGED = "FLAGGED"
    LOCKED = "LOCKED"
    UNLOCKED = "UNLOCKED"
    UNKNOWN = "UNKNOWN"


# The status a template has after each event. REINSTATED ends a flag or a disablement (sendable again);
# UNARCHIVED restores the status from before the archival, which only sendable templates reach (Meta
# archives templates unused for a long time), so APPROVED; the periodic sync corrects a rare other.
# FLAGGED (at risk, still APPROVED), LOCKED and UNLOCKED (editing) leave the status as it is.
_STATUS_AFTER: dict[TemplateEvent, str | None] = {
    TemplateEvent.REINSTATED: "APPROVED",
    TemplateEvent.UNARCHIVED: "APPROVED",
    TemplateEvent.FLAGGED: None,
    TemplateEvent.LOCKED: None,
    TemplateEvent.UNLOCKED: None,
    TemplateEvent.UNKNOWN: None,
}


class QualityScore(_Lenient):
    GREEN = "GREEN"
    YELLOW = "YELLOW"
    RED = "RED"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class TemplateRef:
    """The template a change is about: its WABA, and Meta's id, else its name and language."""

    waba_id: str
    template_id: str | None
    name: str | None
    language: str | None


@dataclass(frozen=True, slots=True)
class TemplateStatusChange:
    template: TemplateRef
    event: TemplateEvent
    raw_event: str
    # Why (Meta's `reason`, e.g. INCORRECT_CATEGORY, or the pause's description); None for NONE.
    reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the change as sent

    @property
    def new_status(self) -> str | None:
        """The template's status after the event; None when the event does not change it."""
        return _STATUS_AFTER.get(self.event, self.event.value)


@dataclass(frozen=True, slots=True)
class TemplateCategoryChange:
    """Completed (`new_category` is the category from now on) or announced (`correct_category` is
    what Meta will change it to; `new_category` is then the current one)."""

    template: TemplateRef
    new_category: str | None
    correct_category: str | None = None
    previous_category: str | None = None
    # When an announced change takes effect (Unix seconds), as Meta says; shown nowhere yet.
    update_timestamp: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def announced(self) -> bool:
        return self.correct_category is not None


@dataclass(frozen=True, slots=True)
class TemplateQualityChange:
    template: TemplateRef
    new_quality: QualityScore
    previous_quality: QualityScore | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


TemplateChange = TemplateStatusChange | TemplateCategoryChange | TemplateQualityChange


def _text(value: dict[str, Any], key: str) -> str | None:
    raw = value.get(key)
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)  # Meta sends template ids as JSON numbers
    return (raw.strip() or None) if isinstance(raw, str) else None


def _reason(value: dict[str, Any]) -> str | None:
    """Meta's `reason` (NONE and null are none), with the detail of `rejection_info` for an
    INVALID_FORMAT rejection, else the pause's own words (`other_info`: a pause's reason is NONE)."""
    reason = _text(value, "reason")
    if reason is not None and reason.upper() == "NONE":
        reason = None
    rejection = value.get("rejection_info")
    detail = _text(rejection, "reason") if isinstance(rejection, dict) else None
    if reason is not None:
        return f"{reason}: {detail}" if detail else reason
    other = value.get("other_info")
    if isinstance(other, dict):
        return _text(other, "description") or _text(other, "title")
    return detail


def _template(value: dict[str, Any], waba_id: str | None, where: str) -> TemplateRef:
    if waba_id is None:
        raise MalformedTemplateChange(f"{where}: entry[].id (the WhatsApp Business Account) is missing")
    ref = TemplateRef(
        waba_id,
        _text(value, "message_template_id"),
        _text(value, "message_template_name"),
        _text(value, "message_template_language"),
    )
    if ref.template_id is None and (ref.name is None or ref.language is None):
        raise MalformedTemplateChange(
            f"{where}: names no template (message_template_id, or name and language)"
        )
    return ref


def _category(value: dict[str, Any], key: str) -> str | None:
    found = _text(value, key)
    return found.upper() if found else None


def template_change(change: dict[str, Any], waba_id: str | None) -> TemplateChange:
    """One change of a field of TEMPLATE_FIELDS; MalformedTemplateChange when it cannot be read."""
    name = str(change.get("field"))
    value = change.get("value")
    if not isinstance(value, dict):
        raise MalformedTemplateChange(f"{name}: changes[].value must be an object")
    template = _template(value, waba_id, name)
    if name == STATUS_FIELD:
        raw = value.get("event")
        if not isinstance(raw, str) or not raw.strip():
            raise MalformedTemplateChange(f"{name}: value.event must be a non-empty string")
        return TemplateStatusChange(template, TemplateEvent(raw), raw.strip(), _reason(value), change)
    if name == CATEGORY_FIELD:
        correct = _category(value, "correct_category")
        new = _category(value, "new_category")
        if correct is None and new is None:
            raise MalformedTemplateChange(f"{name}: neither new_category nor correct_category is given")
        at = _text(value, "category_update_timestamp")
        timestamp = int(at) if at and at.isdigit() else None
        return TemplateCategoryChange(
            template, new, correct, _category(value, "previous_category"), timestamp, change
        )
    new_quality = _text(value, "new_quality_score")
    if new_quality is None:
        raise MalformedTemplateChange(f"{name}: value.new_quality_score must be a string")
    previous = _text(value, "previous_quality_score")
    return TemplateQualityChange(
        template, QualityScore(new_quality), QualityScore(previous) if previous else None, change
    )
