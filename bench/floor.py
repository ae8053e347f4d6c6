"""The floor under the accepted-send ratio (issue 18, point 3): what the cheapest conceivable accepted
send would cost on this machine, measured in one run beside the bare endpoint the targets divide by.

1. The bare FastAPI endpoint (bench/bare_app.py), the targets' denominator: CPU per request.
2. The same endpoint with no framework (`bare_app.py --raw`: a plain ASGI callable on the same uvicorn,
   reading the body and parsing it with the standard library): what serving one request costs
   before any framework or application code. Both under a closed loop of 64 keep-alive connections.
3. The driver alone, in this process: the two rows every accepted send must write before its 201 (the
   message and its outbox row, tables of the gateway's columns and types, no constraints), written
   through the raw DBAPI connection (sqlite3 with `synchronous=FULL` in WAL mode; psycopg to the
   machine's PostgreSQL), 64 sends per transaction (a group commit at 64 connections), one
   statement per row, and again with one multi-row statement per table per transaction. CPU of
   this process per send, the commit included (PostgreSQL's own CPU is not counted).

The floor per accepted send is (2) + (3): no authentication, no checks, no idempotency, no events, no
dispatch, no logs. `bare / floor` is the highest ratio to the bare endpoint any gateway written on
this stack could show; the targets' 0.25 and 0.30 are compared with it.

The same for a status webhook applied (target: 3,000 a second, an absolute figure):
4. A status webhook's request alone: `wagate serve` (bench/stack.py, on SQLite) under the same closed
   loop of Meta's status bodies (bench/statuses.py's), each signed with a wrong secret, so that the
   server does everything a status's POST does before any database work (the protocol's limits, the
   request log and guard, reading the body, checking its signature) and answers 401.
5. The driver alone applying statuses: per status, its message read by wamid and its new status and
   history written (a copy of the messages table with its wamid index, no other constraint), 64
   statuses per transaction, a statement per message and then one statement for all of them.
The floor per status is (4) + (5); `1000 / floor` is the most statuses a second one core could apply
with nothing else done (no parsing into objects, no customers, no events, no costs).

    .venv/bin/python bench/floor.py [--duration 8] [--databases sqlite,postgresql] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import (
    add_databases_option,
    add_json_option,
    cpu_snapshot,
    cpu_usage,
    database_for,
    databases_of,
    log,
    utc_stamp,
    write_json,
)
from loadgen import closed_loop
from sqlalchemy import Column, Index, Integer, MetaData, Table, create_engine
from sqlalchemy.types import NullType
from stack import BARE_BODY, BARE_HEADERS, BareServer, GatewayStack
from statuses import TARGET_PER_SECOND, status_body

from wagate.core.tables import table_of
from wagate.messages.models import Message
from wagate.outbox.models import OutboxJob

BATCH = 64


# --------------------------------------------------------------------------- 1, 2: HTTP


def closed_loop_cpu_ms(
    pid: int,
    url: str,
    body: bytes,
    headers: dict[str, str],
    concurrency: int,
    duration: float,
    ok_status: int,
) -> dict[str, Any]:
    """CPU ms of the server `pid` per answer `ok_status` under a closed loop (after a 1 s warm-up), and
    answers per second."""

    def load(seconds: float) -> Any:
        return asyncio.run(
            closed_loop(
                url,
                make_body=lambda: body,
                headers=headers,
                concurrency=concurrency,
                duration=seconds,
                ok_status=ok_status,
            )
        )

    load(1.0)  # warm-up
    before = cpu_snapshot([pid])
    result = load(duration)
    after = cpu_snapshot([pid])
    per_second = result.summary()["ok_per_second"]
    cpu = cpu_usage(before, after, {"server": [pid]})
    return {
        "ok_per_second": per_second,
        "server_pct": cpu["server_pct"],
        "cpu_ms": round(cpu["server_pct"] * 10 / per_second, 4) if per_second else None,
    }


def serve_cpu_ms(raw: bool, duration: float, concurrency: int, workdir: Path) -> dict[str, Any]:
    """CPU ms of the server per answered request, and requests per second, under a closed loop."""
    server = BareServer(workdir, "raw" if raw else "bare", raw=raw)
    try:
        return closed_loop_cpu_ms(
            server.process.pid, server.url, BARE_BODY, BARE_HEADERS, concurrency, duration, ok_status=201
        )
    finally:
        server.stop()


# --------------------------------------------------------------------------- 3: the driver


def bare_tables(metadata: MetaData) -> tuple[Table, Table]:
    """The messages and outbox tables' columns and types, named apart, with no constraint but the key."""
    copies = []
    for model in (Message, OutboxJob):
        source = table_of(model)
        columns = [
            # A foreign key's column takes its type from the key; without the key it has none of its own.
            Column(c.name, Integer() if isinstance(c.type, NullType) else c.type, primary_key=c.name == "id")
            for c in source.columns
        ]
        copies.append(Table(f"floor_{source.name}", metadata, *columns))
    return copies[0], copies[1]


def rows_of_a_send(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    now = datetime.now(UTC).replace(tzinfo=None)
    message_id = f"msg_{n:026d}"
    body = {"messaging_product": "whatsapp", "to": "994551234567", "type": "template"}
    message = {
        "id": message_id,
        "account_id": 1,
        "channel_id": 1,
        "conversation_id": n,
        "direction": "outbound",
        "phone_number": "+994551234567",
        "user_id": None,
        "status": "queued",
        "sent_as": "template",
        "text": None,
        "template_name": "otp_code",
        "template_language": "en",
        "template_category": "AUTHENTICATION",
        "template_parameters": json.dumps(["123456"]),
        "external_error": None,
        "upstream_message_id": None,
        "cost_micros": 24000,
        "cost_currency": "AZN",
        "cost_category": "AUTHENTICATION",
        "batch_id": None,
        "agent_user_id": None,
        "status_callback": None,
        "status_history": json.dumps([{"status": "queued", "at": now.isoformat()}]),
        "created_at": now,
        "updated_at": now,
    }
    outbox = {
        "id": n,
        "kind": "send_message",
        "state": "ready",
        "priority": 0,
        "channel_id": 1,
        "account_id": 1,
        "message_id": message_id,
        "batch_id": None,
        "ordering_key": None,
        "payload": json.dumps({"body": body}),
        "run_at": now,
        "attempts": 0,
        "last_error": None,
        "locked_by": None,
        "locked_until": None,
        "created_at": now,
        "expires_at": None,
    }
    return in_column_order(Message, message), in_column_order(OutboxJob, outbox)


def in_column_order(model: Any, row: dict[str, Any]) -> dict[str, Any]:
    """The row in its table's column order (the order the inserts name them), NULL in a column the
    row leaves out: one added to the model since, which a send leaves empty."""
    return {column.name: row.get(column.name) for column in table_of(model).columns}


def insert_sql(table: Table, placeholder: str, rows: int = 1) -> str:
    names = [c.name for c in table.columns]
    one = "(" + ", ".join([placeholder] * len(names)) + ")"
    values = ", ".join([one] * rows)
    return f"INSERT INTO {table.name} ({', '.join(names)}) VALUES {values}"  # noqa: S608 (our own names)


@contextlib.contextmanager
def floor_tables(url: str, *, wamid_index: bool = False) -> Iterator[tuple[Table, Table, Any]]:
    """The bare copies of the messages and outbox tables, made anew, and the driver's own connection
    to them (SQLite in WAL mode with `synchronous=FULL`, as the gateway runs it); dropped after."""
    engine = create_engine(url)
    metadata = MetaData()
    messages, outbox = bare_tables(metadata)
    if wamid_index:
        Index("floor_messages_wamid", messages.c.upstream_message_id)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    raw = engine.raw_connection()
    try:
        connection: Any = raw.driver_connection
        if isinstance(connection, sqlite3.Connection):
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
        yield messages, outbox, connection
    finally:
        raw.close()
        metadata.drop_all(engine)
        engine.dispose()


def driver_cpu_us(url: str, sends: int, multi_row: bool) -> float:
    """CPU microseconds of this process per send: its two rows, BATCH sends per transaction."""
    placeholder = "?" if url.startswith("sqlite") else "%s"
    with floor_tables(url) as (messages, outbox, connection):
        single = [insert_sql(messages, placeholder), insert_sql(outbox, placeholder)]
        multi = [insert_sql(messages, placeholder, BATCH), insert_sql(outbox, placeholder, BATCH)]
        cursor = connection.cursor()
        batches = [[rows_of_a_send(b * BATCH + i + 1) for i in range(BATCH)] for b in range(sends // BATCH)]
        started = time.process_time()
        for batch in batches:
            if multi_row:
                for sql, index in zip(multi, (0, 1), strict=True):
                    cursor.execute(sql, [value for pair in batch for value in pair[index].values()])
            else:
                for message, job in batch:
                    cursor.execute(single[0], list(message.values()))
                    cursor.execute(single[1], list(job.values()))
            connection.commit()
        spent = time.process_time() - started
    return round(spent * 1e6 / (len(batches) * BATCH), 1)


# --------------------------------------------------------------------------- 4, 5: a status webhook


def refused_status_cpu_ms(duration: float, concurrency: int) -> dict[str, Any]:
    """CPU ms of `wagate serve` per status webhook answered 401 (a wrong signature), and per second."""
    with GatewayStack() as stack:
        assert stack.server is not None
        entry = {
            "wamid": "wamid.floor",
            "to": "+994551234567",
            "user_id": "AZ.floor",
            "biz_opaque_callback_data": "m",
        }
        body = status_body(entry, "delivered", int(time.time()))
        headers = {"Content-Type": "application/json", "X-Hub-Signature-256": "sha256=" + "0" * 64}
        url = f"{stack.url}/webhooks/whatsapp"
        return closed_loop_cpu_ms(stack.server.pid, url, body, headers, concurrency, duration, ok_status=401)


def as_list(history: Any) -> list[Any]:
    """A JSON column's value: sqlite3 gives its text, psycopg the parsed list."""
    return history if isinstance(history, list) else json.loads(history)


def status_statements(table: str, placeholder: str) -> tuple[str, str, str]:
    """Read BATCH messages by wamid; write one message's status, history and time; write BATCH."""
    marks = ", ".join([placeholder] * BATCH)
    read = f"SELECT id, status, status_history FROM {table} WHERE upstream_message_id IN ({marks})"  # noqa: S608
    one = (
        f"UPDATE {table} SET status = {placeholder}, status_history = {placeholder},"  # noqa: S608
        f" updated_at = {placeholder} WHERE id = {placeholder}"
    )
    if placeholder == "?":
        # SQLite 3.33 and later: an UPDATE from the rows of a VALUES list.
        values = ", ".join([f"({placeholder}, {placeholder}, {placeholder}, {placeholder})"] * BATCH)
        many = (
            f"WITH v(status, history, at, id) AS (VALUES {values})"  # noqa: S608 (our own names)
            f" UPDATE {table} SET status = v.status, status_history = v.history,"
            f" updated_at = v.at FROM v WHERE {table}.id = v.id"
        )
    else:
        cast = f"({placeholder}, {placeholder}::json, {placeholder}::timestamp, {placeholder})"
        many = (
            f"UPDATE {table} AS m SET status = v.status, status_history = v.history,"  # noqa: S608
            f" updated_at = v.at FROM (VALUES {', '.join([cast] * BATCH)}) AS v(status, history, at, id)"
            " WHERE m.id = v.id"
        )
    return read, one, many


def apply_cpu_us(url: str, statuses: int, one_statement: bool) -> float:
    """CPU microseconds of this process per status applied by the driver alone: BATCH messages read by
    wamid, and their status, history and time written, per transaction."""
    placeholder = "?" if url.startswith("sqlite") else "%s"
    rows = []
    for n in range(1, statuses + 1):
        message, _ = rows_of_a_send(n)
        message["upstream_message_id"] = f"wamid.{n:030d}"
        rows.append(message)
    with floor_tables(url, wamid_index=True) as (messages, _, connection):
        read, one, many = status_statements(messages.name, placeholder)
        cursor = connection.cursor()
        for chunk in range(0, len(rows), BATCH):
            values = [list(r.values()) for r in rows[chunk : chunk + BATCH]]
            cursor.executemany(insert_sql(messages, placeholder), values)
        connection.commit()
        batches = [rows[i : i + BATCH] for i in range(0, len(rows) - BATCH + 1, BATCH)]
        started = time.process_time()
        for batch in batches:
            cursor.execute(read, [r["upstream_message_id"] for r in batch])
            now = datetime.now(UTC).replace(tzinfo=None)
            changes = [
                (
                    "delivered",
                    json.dumps([*as_list(history), {"status": "delivered", "at": now.isoformat()}]),
                    now,
                    message_id,
                )
                for message_id, _, history in cursor.fetchall()
            ]
            if one_statement:
                cursor.execute(many, [value for change in changes for value in change])
            else:
                cursor.executemany(one, changes)
            connection.commit()
        spent = time.process_time() - started
    return round(spent * 1e6 / (len(batches) * BATCH), 1)


# --------------------------------------------------------------------------- the run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=8.0, help="closed-loop seconds per server")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--sends", type=int, default=6400, help="sends per driver measurement")
    add_databases_option(parser)
    add_json_option(parser)
    args = parser.parse_args()
    databases = databases_of(parser, args.databases)
    figures: dict[str, Any] = {"stamp": utc_stamp(), "batch": BATCH}
    with tempfile.TemporaryDirectory(prefix="wagate-floor-") as tmp:
        workdir = Path(tmp)
        log(f"bare FastAPI endpoint, {args.concurrency} connections, {args.duration} s")
        figures["bare"] = serve_cpu_ms(False, args.duration, args.concurrency, workdir)
        log("the same endpoint without a framework (plain ASGI on uvicorn)")
        figures["raw_asgi"] = serve_cpu_ms(True, args.duration, args.concurrency, workdir)
        for database in databases:
            with database_for(database) as place:
                if place is None:
                    continue
                url = place[0] or f"sqlite:///{workdir / 'floor.db'}"
                log(f"{database}: the driver alone, {args.sends} sends, then {args.sends} statuses")
                figures[database] = {m: driver_cpu_us(url, args.sends, m) for m in (False, True)}
                figures[f"{database}_statuses"] = {m: apply_cpu_us(url, args.sends, m) for m in (False, True)}
        log(f"a status webhook's request alone: `wagate serve` refusing its signature, {args.duration} s")
        figures["refused_status"] = refused_status_cpu_ms(args.duration, args.concurrency)
    bare_ms = figures["bare"]["cpu_ms"]
    http_ms = figures["raw_asgi"]["cpu_ms"]
    print(f"\nfloor of an accepted send, {figures['stamp']}, {BATCH} sends per transaction\n")
    print(f"{'':44} {'ms of CPU':>10} {'req/s':>8} {'x bare CPU':>11}")
    bare_rate = figures["bare"]["ok_per_second"]
    print(f"{'bare FastAPI endpoint (the denominator)':44} {bare_ms:>10.3f} {bare_rate:>8.0f}")
    print(
        f"{'plain ASGI on uvicorn (no framework)':44} {http_ms:>10.3f} "
        f"{figures['raw_asgi']['ok_per_second']:>8.0f} {http_ms / bare_ms:>11.2f}"
    )
    figures["ceilings"] = {}
    for database in databases:
        if database not in figures:
            continue
        for multi_row, label in ((False, "a statement per row"), (True, "multi-row statements")):
            driver_ms = figures[database][multi_row] / 1000
            floor_ms = http_ms + driver_ms
            ceiling = bare_ms / floor_ms
            figures["ceilings"][f"{database}, {label}"] = round(ceiling, 3)
            print(f"{database + ' driver, ' + label:44} {driver_ms:>10.3f}")
            share = floor_ms / bare_ms
            print(f"{'  floor: plain ASGI + that driver':44} {floor_ms:>10.3f} {'':>8} {share:>11.2f}")
            print(f"{'  highest ratio to the bare endpoint':44} {ceiling:>10.3f}")
    print(
        "\nms of CPU: the server's per answered request (1, 2) or this process's per send's two rows, the"
        "\ncommit included (3). highest ratio: bare / floor, the ratio a gateway doing nothing but serve the"
        "\nrequest and write its two rows could reach (PostgreSQL's own CPU not counted)."
    )
    refused = figures["refused_status"]
    print(f"\nfloor of an applied status, {BATCH} statuses per transaction (target {TARGET_PER_SECOND}/s)\n")
    print(f"{'':44} {'ms of CPU':>10} {'req/s':>8} {'statuses/s':>11}")
    print(
        f"{'status POST alone (wagate serve, 401)':44} {refused['cpu_ms']:>10.3f} "
        f"{refused['ok_per_second']:>8.0f} {1000 / refused['cpu_ms']:>11.0f}"
    )
    figures["status_ceilings"] = {}
    for database in databases:
        if f"{database}_statuses" not in figures:
            continue
        for one_statement, label in ((False, "a statement per status"), (True, "one statement for all")):
            driver_ms = figures[f"{database}_statuses"][one_statement] / 1000
            floor_ms = refused["cpu_ms"] + driver_ms
            ceiling = 1000 / floor_ms
            figures["status_ceilings"][f"{database}, {label}"] = round(ceiling)
            print(f"{database + ' driver, ' + label:44} {driver_ms:>10.3f}")
            print(f"{'  floor: the POST + that driver':44} {floor_ms:>10.3f} {'':>8} {ceiling:>11.0f}")
    print(
        "\nstatuses/s: what one core could apply at that cost with nothing else done (no parsing into"
        "\nobjects, no customers, no events, no costs; PostgreSQL's own CPU not counted); the target leaves"
        f"\n{1000 / TARGET_PER_SECOND:.3f} ms of one core a status."
    )
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
