"""The audit log's rules: an entry is written in the unit of work of the change it records (the
services of accounts, channels and events call `record`), holds no secret, and is read by the
account's administrators, newest first, a page at a time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.audit import repository
from wagate.audit.models import SECRET_REPLACED, SECRET_SET, Actor, AuditAction, AuditEntry
from wagate.core.db import utcnow
from wagate.core.errors import InvalidRequest

PAGE_LIMIT_MAX = 200
# What a value under a key naming a secret may say: that it changed, never what it is.
SECRET_WORDS = ("secret", "token", "password", "key_material")
SECRET_MARKERS = frozenset({SECRET_SET, SECRET_REPLACED})


def _refuse_secrets(changes: Mapping[str, Any], where: str = "") -> None:
    """A programming error, not a request's: a change that would put a secret's value in the log."""
    for name, value in changes.items():
        if isinstance(value, Mapping):
            _refuse_secrets(value, f"{where}{name}.")
        elif any(word in name.lower() for word in SECRET_WORDS) and value not in SECRET_MARKERS:
            raise ValueError(f"audit change {where}{name} must say 'set' or 'replaced', not a value")


def record(
    session: Session,
    actor: Actor,
    *,
    account_id: int,
    action: AuditAction,
    target_type: str,
    target_id: int | str,
    changes: Mapping[str, Any] | None = None,
) -> None:
    """Note a change in the audit log, in the transaction that makes it (so both or neither stay)."""
    changes = dict(changes or {})
    _refuse_secrets(changes)
    repository.add_entry(
        session,
        actor,
        account_id=account_id,
        at=utcnow(),
        action=action.value,
        target_type=target_type,
        target_id=str(target_id),
        changes=changes,
    )


@dataclass(frozen=True)
class AuditPage:
    rows: list[AuditEntry]
    next_before: int | None  # the id to pass as `before` for the next (older) page; None on the last


def parse_action(value: str | None) -> AuditAction | None:
    """An action filter as given (`webhook.created`), or 422 naming the field."""
    if value is None or value == "":
        return None
    try:
        return AuditAction(value)
    except ValueError:
        raise InvalidRequest(
            f"action: unknown action '{value[:60]}'.",
            details=[
                {"field": "action", "issue": "must be one of " + ", ".join(a.value for a in AuditAction)}
            ],
        ) from None


async def audit_page(
    session: AsyncSession,
    *,
    account_id: int,
    before: int | None = None,
    action: AuditAction | None = None,
    limit: int = 50,
) -> AuditPage:
    """The account's audit log, newest first (keyset paging by id). The caller has checked that an
    administrator of the account asks (the API's `Administrator`, the dashboard's settings pages)."""
    found = await repository.entries(
        session,
        account_id=account_id,
        before=before,
        action=None if action is None else action.value,
        limit=limit + 1,
    )
    rows = found[:limit]
    return AuditPage(rows, rows[-1].id if len(found) > limit else None)
