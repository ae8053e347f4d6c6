"""What the models are made of: the declarative `Base` with its constraint names, the column types
(`UTCDateTime`, `BigIntId`), and Core statements on a model's table for the hot paths (`table_of`;
PostgreSQL's `rows_from_json`, `insert_from_json`, `for_each_value`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Insert,
    Integer,
    MetaData,
    Select,
    Table,
    bindparam,
    func,
    insert,
    literal_column,
    select,
    true,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import TableValuedAlias
from sqlalchemy.types import TypeDecorator

# Constraint names fixed by convention so Alembic migrations are the same on SQLite and PostgreSQL.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def table_of(model: type[Base]) -> Table:
    """A model's table, for Core statements on hot paths (no ORM unit of work)."""
    return cast(Table, model.__table__)


def rows_from_json(table: Table, parameter: str) -> TableValuedAlias:
    """PostgreSQL: rows of `table` given as one JSON array of objects keyed by column (the parameter
    `parameter`; a missing key is NULL), as a table to insert from, numbered in their order
    (`ordinality`). One parameter, written by orjson and read by PostgreSQL, both in C: an array per
    column costs the driver a Python loop per value. And the statement's text is the same for any
    number of rows, so PostgreSQL parses and plans it once."""
    rows = func.json_populate_recordset(
        literal_column(f"NULL::{table.name}"), bindparam(parameter, type_=JSON)
    )
    return rows.table_valued(*(column.name for column in table.c), with_ordinality="ordinality")


def insert_from_json(table: Table, parameter: str) -> Insert:
    """PostgreSQL: insert the rows given as JSON in the parameter `parameter` (`rows_from_json`), in
    their order (so are the ids the database gives them); every column but the key is taken from the
    rows."""
    rows = rows_from_json(table, parameter)
    columns = [column.name for column in table.c if not column.primary_key]
    return insert(table).from_select(
        columns, select(*(rows.c[name] for name in columns)).order_by(rows.c.ordinality)
    )


def for_each_value(
    query: Select[*tuple[Any, ...]], column: ColumnElement[Any], parameter: str
) -> Select[*tuple[Any, ...]]:
    """PostgreSQL: `query`, which finds at most one row for one value of `column` (a unique index
    holds it), run for each value of the array parameter `parameter`: one index lookup per value.

    One parameter: the statement's text is the same for any number of values, so psycopg prepares it
    once. And a lookup per value, whatever the table's statistics say: once prepared, a statement
    runs on a generic plan, and for a table that grew since its statistics were taken (the customers
    learned from the statuses of a first campaign) the planner believes it holds a row or two. It
    then chose to read all of the account's rows and compare each one with every value: 9-14 ms for
    an `IN` list, up to 86 ms for a semi-join on the array, instead of about 1, for 136 user ids
    among 3,000 (docs/decisions/0003-status-webhooks.md)."""
    values = func.unnest(bindparam(parameter, type_=postgresql.ARRAY(column.type)))
    wanted = values.table_valued("value").render_derived()
    found = query.where(column == wanted.c.value).limit(1).lateral()
    return select(found).select_from(wanted).join(found, true())


# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
BigIntId = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python, whatever the database keeps."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
