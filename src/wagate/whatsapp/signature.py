"""Meta's webhook signature: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>``.

The gateway's receiver checks with :func:`verify`; tests sign their own bodies with :func:`sign`. The
simulator signs with its own code (it shares none with the gateway).
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Hub-Signature-256"
_PREFIX = "sha256="


def sign(app_secret: str, raw_body: bytes) -> str:
    """Return the header value Meta would send for ``raw_body``."""
    digest = hmac.new(app_secret.encode("utf-8"), raw_body, hashlib.sha256).hexdigest()
    return _PREFIX + digest


def verify(app_secret: str, raw_body: bytes, header_value: str | None) -> bool:
    """True when ``header_value`` is the signature of ``raw_body``.

    The HMAC is recomputed over the raw bytes (never a re-serialised body, whose bytes would differ)
    and compared in constant time so the check leaks nothing about the expected value.
    """
    if not header_value or not app_secret:
        return False
    if not header_value.startswith(_PREFIX):
        return False
    expected = sign(app_secret, raw_body)
    return hmac.compare_digest(
        expected.encode("ascii"), header_value.strip().lower().encode("ascii", "replace")
    )
