"""Standard Webhooks signatures for outgoing events (API.md section 8).

The key is the base64 part of a `whsec_` secret, or the UTF-8 bytes of any other secret (a caller's own
`status_callback.secret`). The `webhook-id` stays the same across retries of one event, so receivers
can drop duplicates.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime

from standardwebhooks import Webhook

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret


def signing_key(secret: str) -> bytes:
    if secret.startswith(SECRET_PREFIX):
        try:
            return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
        except binascii.Error:
            pass  # not base64 after all: the whole string is the key, as for any other secret
    return secret.encode()


def signed_headers(secret: str | None, *, event_id: str, timestamp: datetime, body: str) -> dict[str, str]:
    """Headers for one delivery; without a secret (a status_callback may have none) it is unsigned."""
    headers = {
        "content-type": "application/json",
        "webhook-id": event_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
    }
    if secret:
        headers["webhook-signature"] = Webhook(signing_key(secret)).sign(event_id, timestamp, body)
    return headers
