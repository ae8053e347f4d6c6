"""`wagate provision FILE.json`: create or update accounts, users, keys and channels, idempotently.

A second run with the same file changes nothing and prints the same ids. A key given with an explicit
`token` is printed every time (the caller has it anyway); a generated token is printed only when made.
What a run changes of keys, channels, inbox members and webhooks is in the audit log, by `provisioning`;
a run that changes nothing writes no entry.
"""

from __future__ import annotations

from typing import Any, Literal

import phonenumbers
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from wagate.accounts.actors import record_change
from wagate.accounts.models import Account, ApiKey, Role, User
from wagate.accounts.service import end_sessions, issue_api_key, revoke_api_key, set_token
from wagate.audit.models import PROVISIONING, SECRET_REPLACED, SECRET_SET, AuditAction
from wagate.channels.models import Channel, ChannelMember
from wagate.channels.service import record_membership
from wagate.core.security import SecretBox, hash_api_token, hash_password, verify_password
from wagate.events.models import EventKind, Webhook
from wagate.events.service import new_secret, new_webhook


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserSpec(_Strict):
    email: str = Field(min_length=3)
    name: str
    role: Literal["administrator", "agent"]
    password: str = Field(min_length=1)


class ApiKeySpec(_Strict):
    user: str
    name: str
    token: str | None = Field(None, min_length=20)
    revoked: bool = False


class ChannelSpec(_Strict):
    name: str
    phone_number: str
    phone_number_id: str
    waba_id: str
    access_token: str = Field(min_length=1)
    members: list[str] = []
    messages_per_second: int = Field(80, ge=1, le=1000)


class WebhookSpec(_Strict):
    url: str = Field(pattern=r"^https?://[^/]+")
    events: list[EventKind] = Field(default_factory=lambda: [EventKind.message_updated], min_length=1)


class AccountSpec(_Strict):
    name: str = Field(min_length=1)
    users: list[UserSpec] = []
    api_keys: list[ApiKeySpec] = []
    channels: list[ChannelSpec] = []
    webhooks: list[WebhookSpec] = []


class ProvisionFile(_Strict):
    accounts: list[AccountSpec]


def business_number(raw: str) -> str:
    """The channel's own number in E.164; test numbers (+1 555...) are allowed, so only parse it."""
    try:
        parsed = phonenumbers.parse(raw if raw.startswith("+") else "+" + raw, None)
    except phonenumbers.NumberParseException as exc:
        raise ValueError(f"channel phone_number {raw!r} is not a phone number") from exc
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


def _user(session: Session, account: Account, spec: UserSpec) -> User:
    user = session.scalar(select(User).where(User.email == spec.email.lower()))
    if user is None:
        user = User(
            account_id=account.id, email=spec.email.lower(), password_hash=hash_password(spec.password)
        )
        session.add(user)
    elif user.account_id != account.id:
        raise ValueError(f"user {spec.email} already belongs to another account")
    elif not verify_password(spec.password, user.password_hash):
        user.password_hash = hash_password(spec.password)
        # A new password ends the old one's sessions: whoever signed in with it is out, in every process.
        end_sessions(session, user_id=user.id)
    user.name = spec.name
    user.role = Role(spec.role)
    session.flush()
    return user


def _api_key(session: Session, account: Account, user: User, spec: ApiKeySpec) -> dict[str, Any]:
    key = session.scalar(select(ApiKey).where(ApiKey.user_id == user.id, ApiKey.name == spec.name))
    token = spec.token
    changed: dict[str, Any] = {}
    if key is None:
        issued = issue_api_key(
            session, account_id=account.id, user_id=user.id, name=spec.name, token=token, by=PROVISIONING
        )
        key, token = issued.key, issued.token
    elif token is not None and key.token_hash != hash_api_token(token):
        set_token(key, token)
        changed["token"] = SECRET_REPLACED
    if spec.revoked:
        revoke_api_key(session, account_id=account.id, key_id=key.id, by=PROVISIONING)
    elif key.revoked_at is not None:
        key.revoked_at = None
        changed["revoked"] = False
    session.flush()
    if changed:
        record_change(
            session,
            PROVISIONING,
            account_id=account.id,
            action=AuditAction.api_key_updated,
            target_type="api_key",
            target_id=key.id,
            changes={"name": key.name, **changed},
        )
    return {"user": user.email, "name": key.name, "api_key_id": key.id, "token": token}


def _channel(
    session: Session, account: Account, spec: ChannelSpec, users: dict[str, User], box: SecretBox
) -> Channel:
    channel = session.scalar(select(Channel).where(Channel.phone_number_id == spec.phone_number_id))
    created = channel is None
    if channel is None:
        channel = Channel(account_id=account.id, phone_number_id=spec.phone_number_id)
        session.add(channel)
    elif channel.account_id != account.id:
        raise ValueError(f"phone_number_id {spec.phone_number_id} already belongs to another account")
    wanted_fields: dict[str, Any] = {
        "name": spec.name,
        "phone_number": business_number(spec.phone_number),
        "waba_id": spec.waba_id,
        "messages_per_second": spec.messages_per_second,
    }
    changed: dict[str, Any] = {}
    for field, value in wanted_fields.items():
        before = None if created else getattr(channel, field)
        if before != value:
            changed[field] = value if created else {"from": before, "to": value}
            setattr(channel, field, value)
    resumed = False
    if not box.matches(channel.access_token_encrypted, spec.access_token):
        channel.access_token_encrypted = box.encrypt(spec.access_token)
        changed["access_token"] = SECRET_SET if created else SECRET_REPLACED
        # A new token is the usual fix of a paused channel: try it at once rather than at the next probe.
        resumed = channel.paused_reason is not None
        channel.paused_reason = None
        channel.paused_at = None
    session.flush()
    if changed:
        record_change(
            session,
            PROVISIONING,
            account_id=account.id,
            action=AuditAction.channel_created if created else AuditAction.channel_updated,
            target_type="channel",
            target_id=channel.id,
            changes={"phone_number_id": channel.phone_number_id, **changed} if created else changed,
        )
    if resumed:
        record_change(
            session,
            PROVISIONING,
            account_id=account.id,
            action=AuditAction.channel_resumed,
            target_type="channel",
            target_id=channel.id,
            changes={"why": "a new access token"},
        )
    wanted = set()
    for email in spec.members:
        member = users.get(email.lower()) or session.scalar(select(User).where(User.email == email.lower()))
        if member is None or member.account_id != account.id:
            raise ValueError(f"channel {spec.name}: member {email} is not a user of account {account.name}")
        wanted.add(member.id)
    current = set(
        session.scalars(select(ChannelMember.user_id).where(ChannelMember.channel_id == channel.id))
    )
    for user_id in wanted - current:
        session.add(ChannelMember(channel_id=channel.id, user_id=user_id))
    if current - wanted:
        session.execute(
            delete(ChannelMember).where(
                ChannelMember.channel_id == channel.id, ChannelMember.user_id.in_(current - wanted)
            )
        )
    session.flush()
    if wanted != current:
        emails: dict[int, str] = {
            row[0]: row[1]
            for row in session.execute(select(User.id, User.email).where(User.id.in_(wanted ^ current)))
        }
        for user_id in sorted(wanted ^ current):
            record_membership(
                session,
                PROVISIONING,
                account_id=account.id,
                channel_id=channel.id,
                user_id=user_id,
                added=user_id in wanted,
                channel_name=channel.name,
                email=emails.get(user_id, ""),
            )
    return channel


def _webhook(session: Session, account: Account, spec: WebhookSpec, box: SecretBox) -> dict[str, Any]:
    """By URL within the account; its secret is made once and printed only then (it is stored encrypted).

    The operator's file is trusted: the address is checked when events are delivered.
    """
    webhook = session.scalar(select(Webhook).where(Webhook.account_id == account.id, Webhook.url == spec.url))
    secret = None
    if webhook is None:
        secret = new_secret()
        webhook = new_webhook(
            session,
            account_id=account.id,
            url=spec.url,
            events=spec.events,
            secret=secret,
            box=box,
            by=PROVISIONING,
        )
    elif list(webhook.events) != [e.value for e in spec.events]:
        record_change(
            session,
            PROVISIONING,
            account_id=account.id,
            action=AuditAction.webhook_updated,
            target_type="webhook",
            target_id=webhook.id,
            changes={"events": {"from": list(webhook.events), "to": [e.value for e in spec.events]}},
        )
        webhook.events = [e.value for e in spec.events]
        session.flush()
    return {"id": webhook.id, "url": webhook.url, "events": webhook.events, "secret": secret}


def provision(session: Session, spec: ProvisionFile, *, box: SecretBox) -> dict[str, Any]:
    """Apply the file; returns the ids and tokens to print (templates are synced by the caller)."""
    out: list[dict[str, Any]] = []
    for account_spec in spec.accounts:
        account = session.scalar(select(Account).where(Account.name == account_spec.name))
        if account is None:
            account = Account(name=account_spec.name)
            session.add(account)
            session.flush()
        users = {u.email.lower(): _user(session, account, u) for u in account_spec.users}
        keys = []
        for key_spec in account_spec.api_keys:
            user = users.get(key_spec.user.lower()) or session.scalar(
                select(User).where(User.email == key_spec.user.lower(), User.account_id == account.id)
            )
            if user is None:
                raise ValueError(
                    f"api key {key_spec.name}: no user {key_spec.user} in account {account.name}"
                )
            keys.append(_api_key(session, account, user, key_spec))
        channels = [_channel(session, account, c, users, box) for c in account_spec.channels]
        webhooks = [_webhook(session, account, w, box) for w in account_spec.webhooks]
        out.append(
            {
                "account_id": account.id,
                "name": account.name,
                "channels": [{"channel_id": c.id, "name": c.name} for c in channels],
                "api_keys": keys,
                "webhooks": webhooks,
            }
        )
    return {"accounts": out}
