from __future__ import annotations

import hashlib
import hmac

from wagate.whatsapp.signature import sign, verify


def test_sign_matches_meta_format() -> None:
    body = b'{"object":"whatsapp_business_account"}'
    expected = hmac.new(b"secret", body, hashlib.sha256).hexdigest()
    assert sign("secret", body) == "sha256=" + expected


def test_verify_accepts_only_the_exact_body_and_secret() -> None:
    body = b'{"a":1}'
    header = sign("secret", body)
    assert verify("secret", body, header)
    assert verify("secret", body, header.upper().replace("SHA256=", "sha256="))
    assert not verify("secret", body + b" ", header)
    assert not verify("other", body, header)
    assert not verify("secret", body, None)
    assert not verify("secret", body, "")
    assert not verify("secret", body, header.removeprefix("sha256="))
    assert not verify("secret", body, "sha256=zz")
    assert not verify("secret", body, "sha256=é")
    assert not verify("", body, header)
