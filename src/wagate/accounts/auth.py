"""Bearer API keys: who is calling, for which account, with which role."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends, Request
from sqlalchemy import select

from wagate.accounts.models import ApiKey, Role, User
from wagate.errors import AdministratorRequired, Forbidden, Unauthorized
from wagate.security import hash_api_token


@dataclass(frozen=True)
class Principal:
    api_key_id: int
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


async def authenticate(request: Request) -> Principal:
    """FastAPI dependency: the caller's principal, or 401."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized()
    db = request.app.state.db
    async with db.read() as session:
        row = (
            await session.execute(
                select(ApiKey.id, ApiKey.user_id, ApiKey.account_id, User.role)
                .join(User, User.id == ApiKey.user_id)
                .where(ApiKey.token_hash == hash_api_token(token.strip()), ApiKey.revoked_at.is_(None))
            )
        ).one_or_none()
    if row is None:
        raise Unauthorized("The API key is unknown or revoked.")
    return Principal(api_key_id=row[0], user_id=row[1], account_id=row[2], role=Role(row[3]))


async def account_member(account_id: int, principal: Principal = Depends(authenticate)) -> Principal:
    """FastAPI dependency for `/v1/accounts/{account_id}/...`: 401 without a key, 403 for another account."""
    principal.require_account(account_id)
    return principal
