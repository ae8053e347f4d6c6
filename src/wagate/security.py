"""Secrets at rest: API keys hashed, passwords hashed with scrypt, channel access tokens encrypted."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from wagate.config import Settings
from wagate.db import sqlite_path

API_KEY_PREFIX = "wg_"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}


def new_api_token() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def hash_api_token(token: str) -> str:
    # API keys carry 256 bits of randomness, so a fast hash is enough and keeps auth off the hot path.
    return hashlib.sha256(token.encode()).hexdigest()


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, dklen=32, **_SCRYPT)
    return "scrypt$" + base64.b64encode(salt).decode() + "$" + base64.b64encode(digest).decode()


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, salt_b64, digest_b64 = stored.split("$")
    except ValueError:
        return False
    if scheme != "scrypt":
        return False
    digest = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt_b64), dklen=32, **_SCRYPT)
    return hmac.compare_digest(digest, base64.b64decode(digest_b64))


class SecretBox:
    """Encrypts what must be read back (a channel's Meta access token) with the deployment's key."""

    def __init__(self, key: str) -> None:
        self._fernet = Fernet(key.encode())

    @classmethod
    def from_settings(cls, secret_key: str, key_file: Path) -> SecretBox:
        if secret_key:
            return cls(secret_key)
        # The embedded default: a key made once and kept beside the database, readable only by us.
        if not key_file.exists():
            key_file.parent.mkdir(parents=True, exist_ok=True)
            key_file.write_text(Fernet.generate_key().decode())
            key_file.chmod(0o600)
        return cls(key_file.read_text().strip())

    def encrypt(self, plain: str) -> str:
        return self._fernet.encrypt(plain.encode()).decode()

    def decrypt(self, token: str) -> str:
        return self._fernet.decrypt(token.encode()).decode()

    def matches(self, token: str | None, plain: str) -> bool:
        """Whether `token` encrypts `plain` under this key (False when made with another key)."""
        if token is None:
            return False
        try:
            return self.decrypt(token) == plain
        except InvalidToken:
            return False


def secret_box_for(settings: Settings) -> SecretBox:
    """The deployment's box: `WAGATE_SECRET_KEY`, else a key kept in `wagate.secret` beside the SQLite
    file (or in the working directory)."""
    db_file = sqlite_path(settings.database_url)
    key_dir = db_file.parent if db_file is not None else Path.cwd()
    return SecretBox.from_settings(settings.secret_key, key_dir / "wagate.secret")
