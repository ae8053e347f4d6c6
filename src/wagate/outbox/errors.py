"""The words kept for a failed job (`outbox.last_error`): what went wrong, never what it was about.

A stored error outlives the request and is read by whoever reads the table, so it holds no request
data: no SQL parameters, no webhook or message body, no token, phone number or text. An exception's
own text may hold any of them (PostgreSQL repeats a duplicate key's value and a failing row; our own
ValueErrors name what they refused), so only what cannot hold them is kept: the error's class, and for
the errors we know, their code. The whole exception goes to the log beside it.
"""

from __future__ import annotations

from sqlalchemy.exc import StatementError

MAX_LENGTH = 300


def describe_error(exc: BaseException) -> str:
    """E.g. `IntegrityError (UniqueViolation, SQLSTATE 23505, constraint uq_messages_id)`,
    `RecipientError: 131030: Recipient not allowed`, `ValueError`."""
    kind = type(exc).__name__
    if isinstance(exc, StatementError):
        kind += f" ({_driver_error(exc.orig)})" if exc.orig is not None else ""
    elif isinstance(getattr(exc, "external_error", None), str):
        # An upstream (Meta) error: its code and title, as the API shows them on the message; never
        # its `details`. Read by name, so that the outbox needs nothing of the Cloud API adapter.
        kind += f": {exc.external_error}"  # type: ignore[attr-defined]
    elif isinstance(exc, OSError) and exc.strerror:
        kind += f": {exc.strerror}"  # the system's words for the errno, not the address or file
    return kind[:MAX_LENGTH]


def _driver_error(orig: BaseException) -> str:
    """The database driver's error by its codes and the names of what it concerns, not its text."""
    parts = [type(orig).__name__]
    sqlstate = getattr(orig, "sqlstate", None)  # psycopg
    if sqlstate:
        parts.append(f"SQLSTATE {sqlstate}")
    diag = getattr(orig, "diag", None)
    for name in ("constraint_name", "table_name", "column_name"):
        value = getattr(diag, name, None)
        if value:
            parts.append(f"{name.removesuffix('_name')} {value}")
    sqlite_name = getattr(orig, "sqlite_errorname", None)  # sqlite3, e.g. SQLITE_CONSTRAINT_UNIQUE
    if sqlite_name:
        parts.append(str(sqlite_name))
        # SQLite's constraint messages name the columns, never the values ("UNIQUE constraint
        # failed: messages.upstream_message_id"): the one part of its text that is kept.
        text = str(orig)
        if str(sqlite_name).startswith("SQLITE_CONSTRAINT") and " constraint failed" in text:
            parts.append(text.splitlines()[0][:200])
    return ", ".join(parts)
