"""Meta's system messages (`messages[]` items of `type: "system"`): notices about a customer, not
words of theirs. Meta's system messages reference (2026-08-11): they carry no `contacts` array;
`system.type` is `user_changed_user_id` (the business-scoped user id changed: the new one in
`system.user_id`, the old one in `system.previous_user_id`, no number) or `user_changed_number` (the
new number in `system.wa_id`, formerly `new_wa_id`; since 2026-08-11 also the new and previous user
ids, as a number change makes a new one).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from wagate.whatsapp.payloads import _id_str, _optional_str, _require_str, parse_timestamp

USER_CHANGED_USER_ID = "user_changed_user_id"
USER_CHANGED_NUMBER = "user_changed_number"


@dataclass(frozen=True, slots=True)
class SystemMessage:
    wamid: str
    timestamp: datetime
    kind: str  # system.type as Meta sent it
    body: str | None
    from_: str | None  # the number the message came from (the old one, for a number change)
    user_id: str | None  # the customer's user id now
    previous_user_id: str | None  # the one it replaces
    parent_user_id: str | None = None
    new_wa_id: str | None = None  # a number change's new number

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SystemMessage:
        system = data.get("system")
        system = system if isinstance(system, dict) else {}
        return cls(
            wamid=_require_str(data, "id", "messages[]"),
            timestamp=parse_timestamp(data.get("timestamp"), "messages[].timestamp"),
            kind=_optional_str(system, "type") or "unknown",
            body=_optional_str(system, "body"),
            from_=_id_str(data, "from"),
            user_id=_id_str(system, "user_id"),
            # Meta's reference names the old id in `system`; the message's own `from_user_id` is
            # the id it came from, which is the old one when `system` does not say.
            previous_user_id=_id_str(system, "previous_user_id") or _id_str(data, "from_user_id"),
            parent_user_id=_id_str(system, "parent_user_id"),
            new_wa_id=_id_str(system, "wa_id") or _id_str(system, "new_wa_id"),
        )

    @property
    def moves_user_id(self) -> bool:
        """Whether it names a user id the customer moved from and the one they moved to."""
        return bool(self.user_id and self.previous_user_id and self.user_id != self.previous_user_id)
