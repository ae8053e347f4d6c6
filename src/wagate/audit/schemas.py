"""The audit log as the API shows it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from wagate.audit.models import AuditEntry
from wagate.core.db import isoformat

ENTRY_EXAMPLE: dict[str, Any] = {
    "id": 42,
    "at": "2026-11-24T09:30:01Z",
    "actor": {
        "type": "api_key",
        "user_id": 1,
        "email": "admin@acme.example",
        "api_key_id": 3,
        "api_key_name": "crm",
    },
    "action": "webhook.created",
    "target": {"type": "webhook", "id": "7"},
    "changes": {
        "url": "https://crm.example.com/wagate/events",
        "events": ["message_updated"],
        "secret": "set",
    },
}


class ActorOut(BaseModel):
    type: str = Field(
        description="How: `api_key`, `dashboard` (a signed-in user), `provisioning`, `cli` or `system`."
    )
    user_id: int | None = Field(None, description="The user, for `api_key` and `dashboard`.")
    email: str | None = Field(None, description="The user's email at the time.")
    api_key_id: int | None = None
    api_key_name: str | None = Field(None, description="The key's name at the time, for `api_key`.")


class TargetOut(BaseModel):
    type: str = Field(description="`api_key`, `webhook`, `channel` or `account`.")
    id: str


class AuditEntryOut(BaseModel):
    id: int
    at: str
    actor: ActorOut
    action: str = Field(examples=["api_key.revoked"])
    target: TargetOut
    changes: dict[str, Any] = Field(
        description="What changed (before and after as `from`/`to`); a secret shows as `set` or"
        " `replaced`, never its value."
    )


class AuditLogOut(BaseModel):
    data: list[AuditEntryOut]
    next_before: int | None = Field(
        None, description="Pass as `before` for the next (older) page; null on the last page."
    )


def entry_view(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": isoformat(entry.at),
        "actor": {
            "type": entry.actor_via,
            "user_id": entry.actor_user_id,
            "email": entry.actor_email,
            "api_key_id": entry.actor_api_key_id,
            "api_key_name": entry.actor_api_key_name,
        },
        "action": entry.action,
        "target": {"type": entry.target_type, "id": entry.target_id},
        "changes": entry.changes,
    }
