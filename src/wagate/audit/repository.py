"""The SQL of the audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.audit.models import Actor, AuditEntry
from wagate.core.tables import table_of

_INSERT = insert(table_of(AuditEntry))


def add_entry(
    session: Session,
    actor: Actor,
    *,
    account_id: int,
    at: datetime,
    action: str,
    target_type: str,
    target_id: str,
    changes: dict[str, Any],
) -> None:
    session.execute(
        _INSERT,
        {
            "account_id": account_id,
            "at": at,
            "actor_via": actor.via.value,
            "actor_user_id": actor.user_id,
            "actor_email": actor.email,
            "actor_api_key_id": actor.api_key_id,
            "actor_api_key_name": actor.api_key_name,
            "action": action,
            "target_type": target_type,
            "target_id": target_id,
            "changes": changes,
        },
    )


async def entries(
    session: AsyncSession, *, account_id: int, before: int | None, action: str | None, limit: int
) -> list[AuditEntry]:
    """Up to `limit` entries of the account, newest first, older than `before` (an id) when given:
    one range of `ix_audit_log_account` (or of `ix_audit_log_account_action` with an action)."""
    query = select(AuditEntry).where(AuditEntry.account_id == account_id)
    if action is not None:
        query = query.where(AuditEntry.action == action)
    if before is not None:
        query = query.where(AuditEntry.id < before)
    return list(await session.scalars(query.order_by(AuditEntry.id.desc()).limit(limit)))
