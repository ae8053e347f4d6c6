"""`wagate migrate`: bring the database schema up to date with the package's Alembic migrations."""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from wagate.core.db import create_sqlite_file

MIGRATIONS = Path(__file__).parent.parent / "migrations"


def sync_url(url: str) -> str:
    """Migrations run with a blocking driver: pysqlite for SQLite, psycopg (sync mode) for PostgreSQL."""
    return url.replace("sqlite+aiosqlite:", "sqlite:", 1)


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", sync_url(url).replace("%", "%%"))
    return config


def migrate(url: str) -> None:
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if url.startswith("sqlite"):
        create_sqlite_file(url)  # 0600 before Alembic's connection makes it with the umask's mode
    command.upgrade(alembic_config(url), "head")


def head_revision() -> str:
    """The revision this code's schema is at (the newest migration it carries)."""
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None, "the package carries no migrations"
    return head
