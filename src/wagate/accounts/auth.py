"""Bearer API keys: who is calling, for which account, with which role."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.accounts.models import ApiKey, Role, User
from wagate.core.errors import AdministratorRequired, Forbidden


@dataclass(frozen=True)
class Principal:
    """Who acts: a user of an account, through an API key or (`api_key_id` None) signed in to the
    dashboard. Every rule of the API applies to both alike."""

    api_key_id: int | None
    user_id: int
    account_id: int
    role: Role

    def require_account(self, account_id: int) -> None:
        # An unknown account id is 403 as well, so other tenants' ids cannot be probed.
        if account_id != self.account_id:
            raise Forbidden("This API key belongs to another account.")

    def require_administrator(self) -> None:
        if self.role is not Role.administrator:
            raise AdministratorRequired()


async def load_principal(session: AsyncSession, token_hash: str) -> Principal | None:
    row = (
        await session.execute(
            select(ApiKey.id, ApiKey.user_id, ApiKey.account_id, User.role)
            .join(User, User.id == ApiKey.user_id)
            .where(ApiKey.token_hash == token_hash, ApiKey.revoked_at.is_(None))
        )
    ).one_or_none()
    if row is None:
        return None
    return Principal(api_key_id=row[0], user_id=row[1], account_id=row[2], role=Role(row[3]))


# How often a key's last use is written, at most: the settings page shows it to the minute.
LAST_USE_PRECISION = timedelta(minutes=1)


def record_use(session: Session, *, api_key_id: int, at: datetime) -> None:
    """Note that a request came with the key now (unless noted within the last minute)."""
    session.execute(
        update(ApiKey)
        .where(
            ApiKey.id == api_key_id,
            or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at < at - LAST_USE_PRECISION),
        )
        .values(last_used_at=at)
    )
