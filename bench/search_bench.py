"""Search latency: `chats.search.message_search` over N mixed English/Chinese messages.

    .venv/bin/python bench/search_bench.py [--messages 100000] [--runs 5]
    .venv/bin/python bench/search_bench.py --database-url postgres://postgres@127.0.0.1:5432/x

Builds a fresh database (a temporary SQLite file by default; with a PostgreSQL URL, a
temporary database `hermes_bench_<pid>` on that server, dropped at the end), migrates it,
bulk-loads messages across ~50 chats (the search index is filled by the same triggers /
index maintenance as in production), then times representative queries for a person who
is a member of about half the chats. Every result is checked against a plain Python
substring search before it is timed. Prints Markdown for docs/BENCHMARKS.md.
"""

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    MessageTextGenerator,
    batched,
    database_description,
    machine_info,
    markdown_table,
    median,
    migrate,
    percentile,
    setup_django,
    temporary_database,
    timings_ms,
)

LIMIT = 20

# (label, query, representative?) — representative queries make up the overall p50; the
# others show the worst cases (terms too short for a trigram index that match rarely, so
# the readable history is scanned) and the misses (words that occur nowhere).
QUERIES = [
    ("English word", "deploy", True),
    ("Chinese, 2 characters", "记忆", True),
    ("Chinese, 4 characters", "长期记忆", True),
    ("two terms", "database migration", True),
    ("rare term", "zeppelin", True),
    ("very common term", "the", True),
    ("English + Chinese", "deploy 部署", False),
    ("rare Chinese, 2 characters (scan)", "麒麟", False),
    ("no match, 2 ASCII characters", "qz", False),
    # The search syntax (chats.search_query).
    ("phrase, English", '"database migration"', True),
    ("phrase, Chinese", '"数据库迁移"', True),
    ("OR, English", "zeppelin OR quasar", True),
    ("OR, Chinese", "部署 OR 发布", True),
    ("NOT", "deploy -the", True),
    ("prefix", "migr*", True),
    ("prefix + word", "migr* database", True),
    ("prefix + 2 Chinese characters", "deploy* 部署", False),
    # Cheap misses: words that match nothing.
    ("no match, English word", "quokka", False),
    ("no match, English word (all trigrams exist)", "zeppelinx", False),
    ("no match, English OR", "quokka OR wombat", False),
    ("no match, Chinese, 2 characters", "猫狗", False),
    ("no match, Chinese, 4 characters", "猫狗大战", False),
]

ROLE_WEIGHTS = {
    "user": 50,
    "assistant": 40,
    "tool": 5,
    "summary": 2,
    "system": 1,
    "marker": 2,
}


def load(*, messages: int, chats: int, seed: int):
    """Create chats, actors, a person in every other chat and `messages` messages."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from chats.models import Actor, Chat, ChatKind, ChatMember, Message

    rng = random.Random(seed)
    generator = MessageTextGenerator(seed)
    person = get_user_model().objects.create_user("bench-reader", password=None)
    chat_rows = Chat.objects.bulk_create(
        Chat(
            chat_key=f"web:bench-{i}",
            channel="web",
            external_id=f"bench-{i}",
            kind=ChatKind.ROOM,
            title=f"Bench room {i}",
        )
        for i in range(chats)
    )
    ChatMember.objects.bulk_create(ChatMember(chat=chat, person=person) for chat in chat_rows[::2])
    actors = Actor.objects.bulk_create(
        Actor(channel="web", external_id=f"bench-user-{i}", display_name=f"User {i}")
        for i in range(20)
    )
    roles = list(ROLE_WEIGHTS)
    weights = list(ROLE_WEIGHTS.values())
    now = timezone.now()
    rows = []
    for i in range(messages):
        role = rng.choices(roles, weights)[0]
        is_marker = role == "marker"
        rows.append(
            Message(
                chat=rng.choice(chat_rows),
                actor=None if role in ("assistant", "tool", "summary") else rng.choice(actors),
                role=role,
                text="" if is_marker else generator.text(),
                external_id=f"bench-{i}",
                created_at=now,
                metadata={"marker": "reset"} if is_marker else {},
            )
        )
    started = time.perf_counter()
    for batch in batched(rows, 5000):
        with transaction.atomic():
            Message.objects.bulk_create(batch)
    return person, time.perf_counter() - started


def analyze() -> None:
    """PostgreSQL: refresh planner statistics, as autovacuum would after a bulk load.
    SQLite: nothing — Django never runs ANALYZE there, so neither does the benchmark."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")


def database_size() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA page_count")
            pages = cursor.fetchone()[0]
            cursor.execute("PRAGMA page_size")
            size = pages * cursor.fetchone()[0]
        else:
            cursor.execute("SELECT pg_database_size(current_database())")
            size = cursor.fetchone()[0]
    return f"{size / 1024 / 1024:.0f} MiB"


def expected_hits(person, query: str) -> tuple[int, list[int]]:
    """Plain Python oracle: (number of matching readable messages, newest LIMIT ids)."""
    import re

    from chats.models import Message
    from chats.search import SEARCHABLE_ROLES, parse_search_query
    from chats.selectors import chats_readable_by

    parsed = parse_search_query(query)

    def has(term, text):
        if term.prefix:
            return re.search(r"(?i)(?:^|\W)" + re.escape(term.text), text) is not None
        return term.text.lower() in text.lower()

    def matches(text):
        return all(any(has(t, text) for t in clause) for clause in parsed.clauses) and not any(
            has(t, text) for t in parsed.excluded
        )

    rows = Message.objects.filter(
        chat__in=chats_readable_by(person).order_by().values("id"), role__in=SEARCHABLE_ROLES
    ).values_list("id", "text")
    matching = sorted((pk for pk, text in rows if matches(text)), reverse=True)
    return len(matching), matching[:LIMIT]


def run(args) -> None:
    from chats.search import message_search

    info = machine_info()
    started = time.perf_counter()
    migrate()
    person, load_seconds = load(messages=args.messages, chats=args.chats, seed=args.seed)
    analyze()
    setup_seconds = time.perf_counter() - started

    rows, representative, everything = [], [], []
    for label, query, is_representative in QUERIES:
        matching, expected = expected_hits(person, query)
        hits = message_search(person=person, query=query, limit=LIMIT)
        got = [hit.message.pk for hit in hits]
        if got != expected:
            raise SystemExit(f"wrong results for {query!r}: {got[:5]}... != {expected[:5]}...")
        times = timings_ms(
            lambda query=query: message_search(person=person, query=query, limit=LIMIT),
            runs=args.runs,
        )
        everything += times
        if is_representative:
            representative += times
        rows.append(
            [
                label + ("" if is_representative else " *"),
                f"`{query}`",
                matching,
                len(hits),
                median(times),
                percentile(times, 95),
            ]
        )

    print(f"## Search — {database_description()}, {args.messages:,} messages\n")
    print(
        f"- Machine: {info['CPU']}, {info['cores']} cores, {info['OS']}, "
        f"Python {info['Python']}, load average at start {info['load average']}"
    )
    print(
        f"- Data: {args.messages:,} messages (mixed English/Chinese, generator seed "
        f"{args.seed}) in {args.chats} chats; the searching person is a member of "
        f"{len(range(0, args.chats, 2))}; database {database_size()}"
    )
    print(
        f"- Load: {load_seconds:.1f} s bulk insert with index maintenance "
        f"({args.messages / load_seconds:,.0f} messages/s); set-up total {setup_seconds:.1f} s"
    )
    print(
        f"- Each query: 1 warm-up, then {args.runs} timed calls of `message_search(limit="
        f"{LIMIT})` (SQL + model loading + snippets); results checked against a Python scan"
    )
    print()
    print(
        markdown_table(
            ["query", "text", "matching messages", "hits", "p50 ms", "p95 ms"],
            rows,
        )
    )
    print()
    print(f"**Overall p50 (representative queries): {median(representative):.2f} ms**; ")
    print(f"p50 over all rows: {median(everything):.2f} ms. ")
    print(
        "Rows marked * are extra cases: short terms that scan the readable history, and "
        "misses, which the indexes answer before any scan."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--database-url",
        default=None,
        help="postgres://user@host:port/db: benchmark on a temporary database on that "
        "server (default: a temporary SQLite file)",
    )
    args = parser.parse_args()
    with temporary_database(args.database_url, label="bench") as url:
        setup_django(url)
        run(args)


if __name__ == "__main__":
    main()
