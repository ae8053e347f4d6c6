"""Alembic environment: migrations run with a synchronous driver on the configured database."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from wagate.core.db import ENGINE_OPTIONS
from wagate.ops.schema import Base

config = context.config


def run() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url
    # The app's engine options: a failed statement's error does not repeat its parameters.
    engine = create_engine(url, **ENGINE_OPTIONS)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run()
