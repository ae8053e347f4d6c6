"""The dashboard's conversation list on a large account (issue 11: "an account with 100,000
conversations must stay fast"): times one page of `conversations.service.conversations_for`, the
function behind `/conversations`, on SQLite and PostgreSQL.

    .venv/bin/python bench/conversation_list.py [--conversations 100000] [--databases sqlite,postgresql]

It fills a scratch database with one account, two inboxes and N conversations (contacts included), then
times the first page of each tab, a page deep in the list (by its cursor), a page of one inbox, and a
search by number, each the median of 20 runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from common import add_databases_option, database_for, databases_of
from sqlalchemy import Connection, create_engine, insert
from sqlalchemy.pool import NullPool

from wagate.accounts.models import Account, Role, User
from wagate.channels.models import Channel, ChannelMember
from wagate.conversations.models import Contact, Conversation, ConversationStatus
from wagate.conversations.repository.conversation_list import list_conversations
from wagate.core.db import Database, utcnow
from wagate.core.migrate import migrate, sync_url
from wagate.core.tables import table_of


@contextlib.contextmanager
def scratch_database(database: str) -> Iterator[str | None]:
    """A database of its own ("sqlite" or "postgresql"), migrated to head, dropped afterwards; None
    when PostgreSQL does not answer."""
    with database_for(database) as place, tempfile.TemporaryDirectory() as scratch:
        if place is None:
            yield None
            return
        url = place[0] or f"sqlite+aiosqlite:///{Path(scratch) / 'bench.db'}"
        migrate(url)
        yield url


def add_account_and_inboxes(connection: Connection, now: datetime, *, agent_name: str = "A") -> None:
    """Account 1 with an agent (user 1) who is a member of its two inboxes (channels 1 and 2)."""
    connection.execute(insert(table_of(Account)), {"id": 1, "name": "Big", "created_at": now})
    connection.execute(
        insert(table_of(User)),
        {
            "id": 1,
            "account_id": 1,
            "email": "a@big.test",
            "name": agent_name,
            "role": Role.agent,
            "password_hash": "x",
            "created_at": now,
        },
    )
    for channel_id in (1, 2):
        connection.execute(
            insert(table_of(Channel)),
            {
                "id": channel_id,
                "account_id": 1,
                "name": f"Inbox {channel_id}",
                "provider": "whatsapp_cloud",
                "phone_number": f"+1555000{channel_id:04d}",
                "phone_number_id": f"pn{channel_id}",
                "waba_id": "w",
                "access_token_encrypted": "x",
                "messages_per_second": 80,
                "created_at": now,
            },
        )
        connection.execute(insert(table_of(ChannelMember)), {"channel_id": channel_id, "user_id": 1})


def fill(url: str, count: int) -> None:
    engine = create_engine(sync_url(url), poolclass=NullPool)
    now = utcnow()
    with engine.begin() as connection:
        add_account_and_inboxes(connection, now)
        statuses = [ConversationStatus.open, ConversationStatus.pending, ConversationStatus.resolved]
        for start in range(0, count, 10_000):
            ids = range(start + 1, min(count, start + 10_000) + 1)
            connection.execute(
                insert(table_of(Contact)),
                [
                    {"id": i, "account_id": 1, "phone_number": f"+99455{i:07d}", "created_at": now}
                    for i in ids
                ],
            )
            connection.execute(
                insert(table_of(Conversation)),
                [
                    {
                        "id": i,
                        "account_id": 1,
                        "channel_id": 1 + i % 2,
                        "contact_id": i,
                        "status": statuses[i % 10 % 3 if i % 10 < 3 else 2],
                        "last_activity_at": now - timedelta(seconds=i),
                        "created_at": now,
                    }
                    for i in ids
                ],
            )
    engine.dispose()


async def timed(db: Database, **query: Any) -> float:
    samples = []
    for _ in range(20):
        started = time.perf_counter()
        async with db.read() as session:
            await list_conversations(session, limit=51, **query)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def measure(url: str) -> dict[str, float]:
    db = Database(url)
    try:
        both = {"account_id": 1, "channel_ids": [1, 2], "search": None, "before": None}
        figures = {
            f"first page, {status.value}": await timed(db, status=status, **both)
            for status in ConversationStatus
        }
        async with db.read() as session:
            deep = await list_conversations(
                session,
                account_id=1,
                status=ConversationStatus.resolved,
                limit=1,
                channel_ids=[1, 2],
                search=None,
                before=None,
            )
        cursor = (deep[0].last_activity_at - timedelta(seconds=50_000), 0) if deep else None
        figures["a page deep in resolved (cursor)"] = await timed(
            db,
            account_id=1,
            status=ConversationStatus.resolved,
            channel_ids=[1, 2],
            search=None,
            before=cursor,
        )
        figures["one inbox, resolved"] = await timed(
            db, account_id=1, status=ConversationStatus.resolved, channel_ids=[2], search=None, before=None
        )
        figures["search by number, resolved"] = await timed(
            db,
            account_id=1,
            status=ConversationStatus.resolved,
            channel_ids=[1, 2],
            search="5512345",
            before=None,
        )
        return figures
    finally:
        await db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=100_000)
    add_databases_option(parser)
    args = parser.parse_args()
    for database in databases_of(parser, args.databases):
        with scratch_database(database) as url:
            if url is None:
                continue
            started = time.perf_counter()
            fill(url, args.conversations)
            took = time.perf_counter() - started
            print(f"{database}: {args.conversations} conversations made in {took:.1f} s")
            for what, ms in asyncio.run(measure(url)).items():
                print(f"  {what:<36} {ms:7.2f} ms (median of 20)")


if __name__ == "__main__":
    main()
