"""The conversation list's search at 100,000 conversations (issue 46, point 7): times what `/conversations`
runs for a search, on SQLite and PostgreSQL (loopback only).

    .venv/bin/python bench/conversation_search.py [--conversations 100000] [--runs 50]
        [--databases sqlite,postgresql]

It fills a scratch database (migrated to head) with one account, two inboxes and N conversations whose
customers have Azerbaijani, Turkish and Russian names (some with usernames, a few by user id alone)
and a last message each, the keys folded as the gateway folds them (conversations/search.py). Then,
for a rare term (one customer) and a common one (a word in about a third of the last messages), typed
with capitals and without diacritics as agents type them, it times the first page of 50 of the Open
tab and of "Needs reply", of all inboxes and of one, each as
- `page`: the page's rows (`list_conversations`), and
- `page + counts`: the rows and the tabs' counts (`count_conversations`), what the page runs,
and prints p50 and p99 over `--runs` runs of each.
"""

# Names and messages as customers write them: Azerbaijani and Turkish have a dotless i.
# ruff: noqa: RUF001

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from datetime import timedelta
from typing import Any

from common import add_databases_option, databases_of
from conversation_list import add_account_and_inboxes, scratch_database
from sqlalchemy import create_engine, insert, text
from sqlalchemy.pool import NullPool

from wagate.conversations.last_message import FROM_AGENT, FROM_CUSTOMER, FROM_TEMPLATE, LastMessage
from wagate.conversations.models import Contact, Conversation, ConversationStatus, CustomerId
from wagate.conversations.repository.conversation_list import (
    NEEDS_REPLY,
    count_conversations,
    list_conversations,
)
from wagate.conversations.search import contact_key
from wagate.core.db import Database, utcnow
from wagate.core.migrate import sync_url
from wagate.core.tables import table_of

FIRST = ["Şəhla", "Elçin", "Aysel", "Rəşad", "Günel", "Tural", "Nərmin", "İlkin", "Ülviyyə", "Kamran",
         "Людмила", "Сергей", "Наталья", "Алёна", "Mehmet", "Ayşe", "Gülşən", "Orxan", "Səbinə",
         "Fərid"]  # fmt: skip
LAST = ["Əliyeva", "Məmmədov", "Həsənova", "Quliyev", "Иванова", "Ёлкин", "Öztürk", "Şahin", "Babayev",
        "Nəbiyeva", "Kərimov", "Петров", "Yılmaz", "Cəfərova", "Rzayev"]  # fmt: skip
COMMON = "Salam, sifarişim haradadır? Kuryer gəlmədi."  # a third of the last messages
OTHER = ["Thank you!", "Kod gəlmədi", "Спасибо, всё получил", "Ödəniş keçmədi", "When do you open?",
         "Çatdırılma neçəyədir?", "Hesabıma daxil ola bilmirəm"]  # fmt: skip
RARE_NAME = "Zümrüd Şıxəliyeva"
TERMS = {"rare": "ZUMRUD SIXELI", "common": "SIFARIS"}


def fill(url: str, count: int) -> None:
    engine = create_engine(sync_url(url), poolclass=NullPool)
    now = utcnow()
    pick = random.Random(46)
    statuses = [ConversationStatus.open, ConversationStatus.pending, ConversationStatus.resolved]
    with engine.begin() as connection:
        add_account_and_inboxes(connection, now, agent_name="Agent")
        for start in range(0, count, 10_000):
            contacts, conversations, user_ids = [], [], []
            for i in range(start + 1, min(count, start + 10_000) + 1):
                name = RARE_NAME if i == count // 2 else f"{pick.choice(FIRST)} {pick.choice(LAST)}"
                username = f"user{i}" if i % 7 == 0 else None
                by_user_id = i % 50 == 0  # a customer who hides the number behind a username
                contacts.append(
                    {
                        "id": i,
                        "account_id": 1,
                        "phone_number": None if by_user_id else f"+99455{i:07d}",
                        "name": name,
                        "username": username,
                        "search_key": contact_key(name, username),
                        "created_at": now,
                    }
                )
                if by_user_id:
                    user_ids.append(
                        {"account_id": 1, "user_id": f"AZ.{i:020d}", "contact_id": i, "created_at": now}
                    )
                kind = i % 3
                if kind == 0:
                    last = LastMessage(FROM_CUSTOMER, COMMON)
                elif kind == 1:
                    last = LastMessage(FROM_CUSTOMER, pick.choice(OTHER))
                else:
                    last = (
                        LastMessage(FROM_TEMPLATE, template_name="otp_code")
                        if i % 2
                        else LastMessage(FROM_AGENT, "Salam! Bu gün çatdırılacaq.", agent_user_id=1)
                    )
                at = now - timedelta(seconds=i)
                conversations.append(
                    {
                        "id": i,
                        "account_id": 1,
                        "channel_id": 1 + i // 10 % 2,
                        "contact_id": i,
                        "status": statuses[i % 10 % 3 if i % 10 < 3 else 2],
                        "last_activity_at": at,
                        "last_customer_message_at": at,
                        "created_at": now,
                        # About 1 in 16 waits (a customer spoke last, nobody answered yet), in both inboxes.
                        "waiting_since": at if last.written_by == FROM_CUSTOMER and i % 11 == 0 else None,
                        **last.columns(),
                    }
                )
            connection.execute(insert(table_of(Contact)), contacts)
            connection.execute(insert(table_of(Conversation)), conversations)
            if user_ids:
                connection.execute(insert(table_of(CustomerId)), user_ids)
        if connection.dialect.name == "postgresql":
            connection.execute(text("ANALYZE"))
    engine.dispose()


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


async def timed(db: Database, runs: int, *, counts: bool, **query: Any) -> tuple[float, float, int]:
    samples: list[float] = []
    found = 0
    for _ in range(runs):
        started = time.perf_counter()
        async with db.read() as session:
            rows = await list_conversations(session, account_id=1, before=None, limit=51, **query)
            if counts:
                await count_conversations(
                    session, account_id=1, channel_ids=query["channel_ids"], search=query["search"]
                )
        samples.append((time.perf_counter() - started) * 1000)
        found = len(rows)
    p50, p99 = percentiles(samples)
    return p50, p99, found


async def measure(url: str, runs: int) -> list[tuple[str, float, float, int]]:
    db = Database(url)
    figures = []
    try:
        for term_name, term in [("no search", None), *TERMS.items()]:
            for view, status in [("Open", ConversationStatus.open), ("Needs reply", NEEDS_REPLY)]:
                for inboxes, channel_ids in [("all inboxes", [1, 2]), ("one inbox", [1])]:
                    for counts in (False, True):
                        p50, p99, found = await timed(
                            db, runs, counts=counts, status=status, channel_ids=channel_ids, search=term
                        )
                        parts = "page + counts" if counts else "page"
                        what = f"{term_name} {term or ''}, {view}, {inboxes}, {parts}"
                        figures.append((what, p50, p99, found))
    finally:
        await db.dispose()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=50)
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
            for what, p50, p99, found in asyncio.run(measure(url, args.runs)):
                print(f"  {what:<62} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  ({found} rows)")


if __name__ == "__main__":
    main()
