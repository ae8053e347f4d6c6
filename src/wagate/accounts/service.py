"""API keys: issued to a user of an account, shown once, kept as a hash, revoked at once.

The dashboard (settings > API keys), provisioning and the CLI all issue and revoke keys through these
functions, so a key is made, named and hashed in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.accounts.models import ApiKey, User
from wagate.db import detached, utcnow
from wagate.deps import Gateway
from wagate.errors import Conflict, NotFound
from wagate.security import hash_api_token, new_api_token

# Enough of the token to tell keys apart on a settings page; far too little to guess the rest.
TOKEN_PREFIX_LENGTH = 12


class ApiKeyNotFound(NotFound):
    code = "api_key_not_found"
    message = "No API key with this id exists in the account."


class ApiKeyNameTaken(Conflict):
    code = "api_key_name_taken"
    message = "This user already has an API key with this name."


class UserNotFound(NotFound):
    code = "user_not_found"
    message = "No user with this id exists in the account."


@dataclass(frozen=True)
class IssuedKey:
    """A new key and its token: the only moment the token exists outside its owner's hands."""

    key: ApiKey
    token: str


def set_token(key: ApiKey, token: str) -> None:
    key.token_hash = hash_api_token(token)
    key.token_prefix = token[:TOKEN_PREFIX_LENGTH]


def issue_api_key(
    session: Session, *, account_id: int, user_id: int, name: str, token: str | None = None
) -> IssuedKey:
    """A new key for a user of the account (`token` only when provisioning brings its own)."""
    user = session.scalar(select(User).where(User.id == user_id, User.account_id == account_id))
    if user is None:
        raise UserNotFound()
    if session.scalar(select(ApiKey.id).where(ApiKey.user_id == user_id, ApiKey.name == name)) is not None:
        raise ApiKeyNameTaken()
    token = token or new_api_token()
    key = ApiKey(account_id=account_id, user_id=user_id, name=name)
    set_token(key, token)
    session.add(key)
    session.flush()
    return IssuedKey(key=key, token=token)


def revoke_api_key(session: Session, *, account_id: int, key_id: int, user_id: int | None = None) -> ApiKey:
    """Revoke a key of the account (of that user only, when `user_id` is given); revoking twice is a
    no-op that keeps the first time."""
    query = select(ApiKey).where(ApiKey.id == key_id, ApiKey.account_id == account_id)
    if user_id is not None:
        query = query.where(ApiKey.user_id == user_id)
    key = session.scalar(query)
    if key is None:
        raise ApiKeyNotFound()
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.flush()
    return key


async def list_api_keys(
    session: AsyncSession, *, account_id: int, user_id: int | None = None
) -> list[ApiKey]:
    query = select(ApiKey).where(ApiKey.account_id == account_id)
    if user_id is not None:
        query = query.where(ApiKey.user_id == user_id)
    return list(await session.scalars(query.order_by(ApiKey.id)))


# The actions, as the dashboard takes them: one transaction each; a revoked key is refused by this
# process at once (its cached principal dropped) and by the others within the cache's 5 s.


async def create_api_key(gateway: Gateway, *, account_id: int, user_id: int, name: str) -> IssuedKey:
    def unit(session: Session) -> IssuedKey:
        issued = issue_api_key(session, account_id=account_id, user_id=user_id, name=name)
        return IssuedKey(key=detached(session, issued.key), token=issued.token)

    issued: IssuedKey = await gateway.db.write(unit)
    gateway.lookups.forget_principal(issued.key.token_hash)
    return issued


async def revoke_key(gateway: Gateway, *, account_id: int, key_id: int, user_id: int | None = None) -> ApiKey:
    key: ApiKey = await gateway.db.write(
        lambda session: detached(
            session, revoke_api_key(session, account_id=account_id, key_id=key_id, user_id=user_id)
        )
    )
    gateway.lookups.forget_principal(key.token_hash)
    return key
