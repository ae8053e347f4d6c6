"""Who made a change, as the audit log records it: the principal of a request or dashboard session
(with its email and API key name, copied in the same transaction), or an operator's command."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from wagate.accounts.auth import Principal
from wagate.accounts.models import ApiKey, User
from wagate.audit import service as audit
from wagate.audit.models import Actor, AuditAction, Via

By = Principal | Actor


def actor_for(session: Session, by: By) -> Actor:
    if isinstance(by, Actor):
        return by
    row = session.execute(
        select(User.email, ApiKey.name)
        .select_from(User)
        .outerjoin(ApiKey, and_(ApiKey.id == by.api_key_id, ApiKey.user_id == User.id))
        .where(User.id == by.user_id)
    ).one_or_none()
    email, key_name = (row[0], row[1]) if row is not None else (None, None)
    return Actor(
        via=Via.api_key if by.api_key_id is not None else Via.dashboard,
        user_id=by.user_id,
        email=email,
        api_key_id=by.api_key_id,
        api_key_name=key_name,
    )


def record_change(
    session: Session,
    by: By,
    *,
    account_id: int,
    action: AuditAction,
    target_type: str,
    target_id: int | str,
    changes: Mapping[str, Any] | None = None,
) -> None:
    """Write the audit entry of a change, in the unit of work that makes it."""
    audit.record(
        session,
        actor_for(session, by),
        account_id=account_id,
        action=action,
        target_type=target_type,
        target_id=target_id,
        changes=changes,
    )
