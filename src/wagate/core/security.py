"""Secrets at rest: API keys hashed, passwords hashed with argon2id, channel access tokens and webhook and
callback secrets encrypted with the deployment's keys (several during a rotation: the first encrypts,
every one decrypts; `wagate secrets rotate` re-encrypts what an older key made)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from wagate.core.config import Settings
from wagate.core.db import sqlite_path

API_KEY_PREFIX = "wg_"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}  # of the password hashes made before argon2id


def new_api_token() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def hash_api_token(token: str) -> str:
    # API keys carry 256 bits of randomness, so a fast hash is enough and keeps auth off the hot path.
    return hashlib.sha256(token.encode()).hexdigest()


# argon2-cffi's defaults (argon2id, RFC 9106's low-memory profile: 64 MiB, 3 passes); about 50 ms of
# one core per check, which is also what makes guessing slow.
_ARGON2 = PasswordHasher()


def hash_password(password: str) -> str:
    return _ARGON2.hash(password)


def verify_password(password: str, stored: str) -> bool:
    """Whether `password` is the one `stored` was made from: argon2id, or the scrypt hashes of
    databases made before argon2 (see `password_needs_rehash`)."""
    if stored.startswith("scrypt$"):
        return _verify_scrypt(password, stored)
    try:
        return _ARGON2.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


def password_needs_rehash(stored: str) -> bool:
    """A hash of an older scheme or weaker parameters: replaced at the next successful sign-in."""
    return stored.startswith("scrypt$") or _ARGON2.check_needs_rehash(stored)


def _verify_scrypt(password: str, stored: str) -> bool:
    try:
        _scheme, salt_b64, digest_b64 = stored.split("$")
    except ValueError:
        return False
    digest = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt_b64), dklen=32, **_SCRYPT)
    return hmac.compare_digest(digest, base64.b64decode(digest_b64))


class SecretKeyError(ValueError):
    """The configured key (or key file) is not a list of Fernet keys; the message names no key."""


def parse_keys(value: str) -> list[str]:
    """Comma-separated Fernet keys, the one that encrypts first; each is checked (SecretKeyError)."""
    keys = [part.strip() for part in value.replace("\n", ",").split(",") if part.strip()]
    if not keys:
        raise SecretKeyError("no secret key given")
    for position, key in enumerate(keys, start=1):
        try:
            Fernet(key.encode())
        except (ValueError, TypeError):
            # Never the key itself in the message: it ends up in logs.
            raise SecretKeyError(
                f"secret key {position} of {len(keys)} is not a Fernet key (32 url-safe base64-encoded bytes;"
                " `wagate secrets new-key` makes one)"
            ) from None
    return keys


def new_secret_key() -> str:
    return Fernet.generate_key().decode()


class SecretBox:
    """Encrypts what must be read back (channels' Meta access tokens, webhook and callback signing
    secrets) with the deployment's keys: the first key encrypts, every key decrypts (MultiFernet), so a
    new key can be added before the old one is retired (docs/operations.md, "Rotating the secret key")."""

    def __init__(self, key: str) -> None:
        keys = parse_keys(key)
        self.key_count = len(keys)
        self._primary = Fernet(keys[0].encode())
        self._fernet = MultiFernet([Fernet(k.encode()) for k in keys])

    @classmethod
    def from_settings(cls, secret_key: str, key_file: Path) -> SecretBox:
        if secret_key:
            return cls(secret_key)
        # The embedded default: a key made once and kept beside the database, readable only by us. The
        # file may hold several keys too (comma- or line-separated, the encrypting one first).
        return cls(read_or_create_key_file(key_file))

    def encrypt(self, plain: str) -> str:
        return self._fernet.encrypt(plain.encode()).decode()

    def decrypt(self, token: str) -> str:
        return self._fernet.decrypt(token.encode()).decode()

    def is_current(self, token: str) -> bool:
        """Whether `token` was made with the first key (nothing to rotate)."""
        try:
            self._primary.decrypt(token.encode())
        except InvalidToken:
            return False
        return True

    def rotate(self, token: str) -> str:
        """`token`'s plain text encrypted again with the first key (InvalidToken when no key reads it)."""
        return self._fernet.rotate(token.encode()).decode()

    def matches(self, token: str | None, plain: str) -> bool:
        """Whether `token` encrypts `plain` under one of the keys (False when made with another key)."""
        if token is None:
            return False
        try:
            return self.decrypt(token) == plain
        except InvalidToken:
            return False


def read_or_create_key_file(key_file: Path, *, wait_seconds: float = 5.0) -> str:
    """The key(s) in `key_file`, made first when it does not exist: created 0600 (never readable by
    others, not even for a moment) and exclusively, so two processes starting together cannot each
    write a key of their own: the one that loses the race reads the winner's, once it is written."""
    if not key_file.exists():
        key_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process made it first: read theirs below
        else:
            with os.fdopen(fd, "w") as out:
                out.write(new_secret_key())
                out.flush()
                os.fsync(out.fileno())
    deadline = time.monotonic() + wait_seconds
    while not (keys := key_file.read_text().strip()):
        # Created and not written yet: another process is writing it now.
        if time.monotonic() > deadline:
            raise SecretKeyError(
                f"the key file {key_file} is empty (a process died while making it?): delete it, if no "
                "data was ever encrypted with it, or put the key back"
            )
        time.sleep(0.05)
    return keys


def secret_box_for(settings: Settings) -> SecretBox:
    """The deployment's box: `WAGATE_SECRET_KEY` (one or more comma-separated keys), else the key(s)
    kept in `wagate.secret` beside the SQLite file (or in the working directory)."""
    db_file = sqlite_path(settings.database_url)
    key_dir = db_file.parent if db_file is not None else Path.cwd()
    return SecretBox.from_settings(settings.secret_key, key_dir / "wagate.secret")
