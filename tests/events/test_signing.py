"""Our event signatures verify with the Standard Webhooks library, as a receiver would check them."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from wagate.events.service import new_secret
from wagate.events.signing import signed_headers


def test_a_whsec_secret_verifies_with_the_library() -> None:
    secret = new_secret()
    body = '{"event":"message_updated","account_id":1}'
    headers = signed_headers(secret, event_id="evt_1", timestamp=datetime.now(UTC), body=body)
    assert headers["webhook-signature"].startswith("v1,")
    Webhook(secret).verify(body, headers)  # raises when the signature is wrong
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace("1}", "2}"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)


def test_any_other_secret_is_used_as_its_utf8_bytes() -> None:
    secret = "my callback secret"
    now = datetime.now(UTC)
    body = '{"event":"message_status"}'
    headers = signed_headers(secret, event_id="evt_2", timestamp=now, body=body)
    Webhook(secret.encode()).verify(body, headers)
    signed = f"evt_2.{int(now.timestamp())}.{body}".encode()
    expected = base64.b64encode(hmac.new(secret.encode(), signed, hashlib.sha256).digest()).decode()
    assert headers["webhook-signature"] == f"v1,{expected}"


def test_without_a_secret_the_delivery_is_unsigned_but_identified() -> None:
    headers = signed_headers(None, event_id="evt_3", timestamp=datetime.now(UTC), body="{}")
    assert "webhook-signature" not in headers and headers["webhook-id"] == "evt_3"
