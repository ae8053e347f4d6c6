"""API keys: issued to a user of an account, shown once, kept as a hash, revoked at once.

The dashboard (settings > API keys), provisioning and the CLI all issue and revoke keys through these
functions, so a key is made, named and hashed in one place.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from wagate.accounts.actors import By, record_change
from wagate.accounts.auth import Principal
from wagate.accounts.callers import forget_principal
from wagate.accounts.models import ApiKey, DashboardSession, Role, User
from wagate.accounts.passwords import password_checks
from wagate.accounts.sign_in_limits import AttemptKeys, count_attempt, take_back_attempt, uncount_attempt
from wagate.audit.models import AuditAction
from wagate.core.db import Database, utcnow
from wagate.core.errors import (
    ApiKeyNameTaken,
    ApiKeyNotFound,
    InvalidRequest,
    PasswordChecksBusy,
    SignInThrottled,
    UserNotFound,
    WrongCredentials,
)
from wagate.core.security import (
    hash_api_token,
    hash_password,
    new_api_token,
    password_needs_rehash,
    verify_password,
)
from wagate.core.units import detached
from wagate.runtime.gateway import Gateway

# Enough of the token to tell keys apart on a settings page; far too little to guess the rest.
TOKEN_PREFIX_LENGTH = 12
# The column's size: a name says what the key is for ("crm", "zapier"), never a secret.
API_KEY_NAME_LENGTH = 200


@dataclass(frozen=True)
class IssuedKey:
    """A new key and its token: the only moment the token exists outside its owner's hands."""

    key: ApiKey
    token: str


def set_token(key: ApiKey, token: str) -> None:
    key.token_hash = hash_api_token(token)
    key.token_prefix = token[:TOKEN_PREFIX_LENGTH]


def issue_api_key(
    session: Session, *, account_id: int, user_id: int, name: str, by: By, token: str | None = None
) -> IssuedKey:
    """A new key for a user of the account (`token` only when provisioning brings its own), recorded in
    the audit log as made `by` that principal or command."""
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
    record_change(
        session,
        by,
        account_id=account_id,
        action=AuditAction.api_key_created,
        target_type="api_key",
        target_id=key.id,
        changes={
            "name": name,
            "owner_user_id": user_id,
            "owner_email": user.email,
            "prefix": key.token_prefix,
        },
    )
    return IssuedKey(key=key, token=token)


def revoke_api_key(
    session: Session, *, account_id: int, key_id: int, by: By, user_id: int | None = None
) -> ApiKey:
    """Revoke a key of the account (of that user only, when `user_id` is given); revoking twice is a
    no-op that keeps the first time (and is not audited again)."""
    query = select(ApiKey).where(ApiKey.id == key_id, ApiKey.account_id == account_id)
    if user_id is not None:
        query = query.where(ApiKey.user_id == user_id)
    key = session.scalar(query)
    if key is None:
        raise ApiKeyNotFound()
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.flush()
        record_change(
            session,
            by,
            account_id=account_id,
            action=AuditAction.api_key_revoked,
            target_type="api_key",
            target_id=key.id,
            changes={"name": key.name, "owner_user_id": key.user_id, "prefix": key.token_prefix},
        )
    return key


async def list_api_keys(
    session: AsyncSession, *, account_id: int, user_id: int | None = None
) -> list[ApiKey]:
    query = select(ApiKey).where(ApiKey.account_id == account_id)
    if user_id is not None:
        query = query.where(ApiKey.user_id == user_id)
    return list(await session.scalars(query.order_by(ApiKey.id)))


@dataclass(frozen=True)
class ListedKey:
    """A key as the settings page lists it: the key (never its token) and who owns it."""

    key: ApiKey
    owner_name: str
    owner_email: str


@dataclass(frozen=True)
class KeyPage:
    rows: list[ListedKey]
    next_before: int | None  # the id to ask `before` for the next (older) page, None on the last


async def api_key_page(
    session: AsyncSession, *, account_id: int, before_id: int | None = None, limit: int = 50
) -> KeyPage:
    """The account's keys, revoked ones included, newest first, `limit` at a time."""
    query = (
        select(ApiKey, User.name, User.email)
        .join(User, User.id == ApiKey.user_id)
        .where(ApiKey.account_id == account_id)
    )
    if before_id is not None:
        query = query.where(ApiKey.id < before_id)
    found = (await session.execute(query.order_by(ApiKey.id.desc()).limit(limit + 1))).all()
    rows = [ListedKey(key, name, email) for key, name, email in found[:limit]]
    return KeyPage(rows, rows[-1].key.id if len(found) > limit else None)


async def account_users(session: AsyncSession, *, account_id: int) -> list[User]:
    """The users of the account, by name: who may own a key or be an inbox's member."""
    return list(
        await session.scalars(select(User).where(User.account_id == account_id).order_by(User.name, User.id))
    )


# The actions, as the dashboard takes them: one transaction each; a revoked key is refused by this
# process at once (its cached principal dropped) and by the others within the cache's 5 s.


async def create_api_key(gateway: Gateway, *, account_id: int, user_id: int, name: str, by: By) -> IssuedKey:
    """A new key for a user of the account, named as typed (surrounding spaces dropped): 422 for an
    empty or too long name, 409 for a name the user's other keys have, 404 for a user of another
    account. `by`: who asks (the audit log's actor)."""
    name = name.strip()
    if not name or len(name) > API_KEY_NAME_LENGTH:
        raise InvalidRequest(
            f"An API key needs a name of 1 to {API_KEY_NAME_LENGTH} characters.",
            details=[{"field": "name", "issue": f"must be 1 to {API_KEY_NAME_LENGTH} characters"}],
        )

    def unit(session: Session) -> IssuedKey:
        issued = issue_api_key(session, account_id=account_id, user_id=user_id, name=name, by=by)
        return IssuedKey(key=detached(session, issued.key), token=issued.token)

    issued: IssuedKey = await gateway.db.write(unit)
    forget_principal(gateway.caches, issued.key.token_hash)
    return issued


async def revoke_key(
    gateway: Gateway, *, account_id: int, key_id: int, by: By, user_id: int | None = None
) -> ApiKey:
    key: ApiKey = await gateway.db.write(
        lambda session: detached(
            session, revoke_api_key(session, account_id=account_id, key_id=key_id, by=by, user_id=user_id)
        )
    )
    forget_principal(gateway.caches, key.token_hash)
    return key


# --- signing in to the dashboard ------------------------------------------------------------------

SESSION_LIFETIME = timedelta(hours=12)


@functools.cache
def _no_user_hash() -> str:
    """A password hash of no user, checked when the email is unknown, so that the answer takes as long."""
    return hash_password(secrets.token_urlsafe())


@dataclass(frozen=True)
class SignedIn:
    """A new dashboard session: the cookie's token (its only copy) and the form token."""

    token: str
    csrf_token: str
    expires_at: datetime


@dataclass(frozen=True)
class SessionUser:
    """Who a dashboard session belongs to, with the principal every service takes."""

    principal: Principal
    name: str
    email: str
    csrf_token: str

    @property
    def is_administrator(self) -> bool:
        return self.principal.role is Role.administrator


async def sign_in(gateway: Gateway, *, email: str, password: str, client: str) -> SignedIn:
    """A dashboard session for the user with this email and password (API.md section 12): 401
    `wrong_credentials` for either wrong, 429 `rate_limited` with `Retry-After` past the limits of
    accounts/sign_in_limits.py, counted before the password is checked."""
    email = email.strip().lower()
    keys = AttemptKeys.of(email, client)
    now = utcnow()
    wait = await gateway.db.write(lambda session: count_attempt(session, keys, now))
    if wait:
        raise SignInThrottled(
            f"Too many failed sign-ins: try again in {wait} s.", headers={"Retry-After": str(wait)}
        )
    async with gateway.db.read() as session:
        user = await session.scalar(select(User).where(User.email == email))
    stored = user.password_hash if user is not None else None
    # An unknown email is checked against a hash of no one, so that the answer takes as long.
    try:
        valid = await password_checks.run(lambda: verify_password(password, stored or _no_user_hash()))
    except PasswordChecksBusy:
        await gateway.db.write(lambda session: uncount_attempt(session, keys))
        raise
    if user is None or stored is None or not valid:
        raise WrongCredentials()
    token, csrf_token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    expires_at = now + SESSION_LIFETIME
    new_hash = (
        await password_checks.run(lambda: hash_password(password)) if password_needs_rehash(stored) else None
    )
    user_id = user.id

    def start(session: Session) -> None:
        session.add(
            DashboardSession(
                token_hash=hash_api_token(token),
                user_id=user_id,
                csrf_token=csrf_token,
                created_at=now,
                expires_at=expires_at,
            )
        )
        if new_hash is not None:  # an older scheme (scrypt): argon2id from now on
            session.execute(update(User).where(User.id == user_id).values(password_hash=new_hash))
        take_back_attempt(session, keys, now)
        # Sessions that ran out are forgotten here: signing in is rare enough to carry it.
        session.execute(delete(DashboardSession).where(DashboardSession.expires_at < now))

    await gateway.db.write(start)
    return SignedIn(token, csrf_token, expires_at)


async def session_user(gateway: Gateway, token: str) -> SessionUser | None:
    """The user a dashboard session cookie belongs to, None when unknown, signed out or expired."""
    async with gateway.db.read() as session:
        row = (
            await session.execute(
                select(User, DashboardSession.csrf_token)
                .join(DashboardSession, DashboardSession.user_id == User.id)
                .where(
                    DashboardSession.token_hash == hash_api_token(token),
                    DashboardSession.expires_at > utcnow(),
                )
            )
        ).one_or_none()
    if row is None:
        return None
    user: User = row[0]
    principal = Principal(api_key_id=None, user_id=user.id, account_id=user.account_id, role=user.role)
    return SessionUser(principal, user.name, user.email, row[1])


def end_sessions(session: Session, *, user_id: int) -> int:
    """Sign the user out everywhere: every dashboard session of theirs ends (a password change, or an
    operator's `wagate users sign-out`); their cookies sign no one in from the next request, in every
    process. Returns how many sessions ended."""
    ended = session.execute(delete(DashboardSession).where(DashboardSession.user_id == user_id))
    return int(getattr(ended, "rowcount", 0) or 0)


async def sign_out_everywhere(db: Database, *, email: str) -> int:
    """`wagate users sign-out EMAIL`: end every session of the user with this email (UserNotFound when
    there is none). Returns how many ended."""

    def unit(session: Session) -> int:
        user_id = session.scalar(select(User.id).where(User.email == email.strip().lower()))
        if user_id is None:
            raise UserNotFound()
        return end_sessions(session, user_id=user_id)

    ended: int = await db.write(unit)
    return ended


async def sign_out(gateway: Gateway, token: str) -> None:
    """End the session: its cookie signs no one in any more, in any process."""
    token_hash = hash_api_token(token)
    await gateway.db.write(
        lambda session: session.execute(
            delete(DashboardSession).where(DashboardSession.token_hash == token_hash)
        )
    )
