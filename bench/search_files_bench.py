"""Search inside files: what looking in attachments' text adds to `message_search`.

    .venv/bin/python bench/search_files_bench.py [--messages 50000] [--files 2000]
        [--pages 10] [--runs 7] [--database-url postgres://…]

Builds a fresh database as bench/search_bench.py does (its messages, chats and reader),
then puts `--files` files on random messages, each with `--pages` pages (~2,000 characters
each, from the same text generator) of extracted text, indexed by the attachments' search
index (migration attachments/0005: its triggers on SQLite, GIN indexes on PostgreSQL).
Every query is timed twice, alternating, with the attachments' search text source
registered (messages and files) and unregistered (messages only, as before issue 33): the
difference is the cost of searching files. Results with files are checked first against a
Python oracle (the newest 20 of: readable messages whose text matches, and readable
messages one of whose files' texts matches). Prints Markdown for docs/BENCHMARKS.md.
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
)
from bench.search_bench import LIMIT, analyze, database_size, load  # noqa: E402

QUERIES = [
    ("English word", "deploy"),
    ("rare term", "zeppelin"),
    ("two terms", "database migration"),
    ("Chinese, 4 characters", "长期记忆"),
    ("phrase", '"database migration"'),
    ("prefix + word", "migr* database"),
    ("NOT", "deploy -the"),
    ("very common term", "the"),
    ("no match", "quokka"),
    ("2 characters (files not searched)", "记忆"),
]


def add_files(*, files: int, pages: int, seed: int) -> float:
    """`files` attachments with extracted text on random searchable messages."""
    from django.db import transaction

    from attachments.models import Attachment
    from chats.models import Message

    rng = random.Random(seed + 1)
    generator = MessageTextGenerator(seed + 1)
    ids = list(Message.objects.filter(role__in=["user", "assistant"]).values_list("id", flat=True))
    # A file is stored right after its message: file ids follow message ids.
    chosen = sorted(rng.choice(ids) for _ in range(files))
    rows = []
    for index, message_id in enumerate(chosen):
        text = "\f".join(" ".join(generator.text() for _ in range(12))[:2000] for _ in range(pages))
        rows.append(
            Attachment(
                message_id=message_id,
                name=f"doc-{index}.pdf",
                kind="document",
                media_type="application/pdf",
                size=len(text),
                sha256=f"{index:064x}",
                state="ready",
                extracted_text=text,
                page_count=pages,
            )
        )
    started = time.perf_counter()
    for batch in batched(rows, 200):
        with transaction.atomic():
            Attachment.objects.bulk_create(batch)
    return time.perf_counter() - started


def expected_ids(person, query: str) -> list[int]:
    """The oracle: newest LIMIT readable messages whose text, or one of whose files' texts,
    holds the whole query (terms as substrings or word starts, OR, NOT)."""
    import re

    from attachments.models import Attachment
    from chats.models import Message
    from chats.search import SEARCHABLE_ROLES, parse_search_query
    from chats.search_postgresql import clause_is_indexable
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

    readable = chats_readable_by(person).order_by().values("id")
    rows = dict(
        Message.objects.filter(chat__in=readable, role__in=SEARCHABLE_ROLES).values_list(
            "id", "text"
        )
    )
    found = {pk for pk, text in rows.items() if matches(text)}
    if any(map(clause_is_indexable, parsed.clauses)):
        for message_id, text, description in Attachment.objects.filter(
            message_id__in=list(rows)
        ).values_list("message_id", "extracted_text", "description"):
            excluded = any(has(t, rows[message_id]) for t in parsed.excluded)
            if not excluded and (matches(text) or matches(description)):
                found.add(message_id)
    return sorted(found, reverse=True)[:LIMIT]


def run(args) -> None:
    from django.db import connection

    from attachments.search_filters import TEXT_SOURCE
    from chats.search import message_search
    from chats.search_sources import register_search_text_source, unregister_search_text_source

    info = machine_info()
    migrate()
    person, load_seconds = load(messages=args.messages, chats=args.chats, seed=args.seed)
    files_seconds = add_files(files=args.files, pages=args.pages, seed=args.seed)
    analyze()

    def search(query):
        return message_search(person=person, query=query, limit=LIMIT)

    rows = []
    with_files_all, without_all = [], []
    for label, query in QUERIES:
        register_search_text_source(TEXT_SOURCE)
        hits = search(query)
        complete = [hit.message.pk for hit in hits] == expected_ids(person, query)
        if not complete and connection.vendor != "postgresql":
            raise SystemExit(f"wrong results for {query!r}")
        # PostgreSQL: an index path past its time bound answers with the hits found so far.
        in_files = sum(hit.matched_in is not None for hit in hits)
        with_files, without = [], []
        search(query)  # warm-up, both ways
        unregister_search_text_source(TEXT_SOURCE.name)
        search(query)
        for _ in range(args.runs):
            register_search_text_source(TEXT_SOURCE)
            started = time.perf_counter()
            search(query)
            with_files.append((time.perf_counter() - started) * 1000)
            unregister_search_text_source(TEXT_SOURCE.name)
            started = time.perf_counter()
            search(query)
            without.append((time.perf_counter() - started) * 1000)
        register_search_text_source(TEXT_SOURCE)
        with_files_all += with_files
        without_all += without
        rows.append(
            [
                label + ("" if complete else " †"),
                f"`{query}`",
                len(hits),
                in_files,
                median(without),
                median(with_files),
                percentile(with_files, 95),
            ]
        )

    print(f"## Search inside files — {database_description()}\n")
    print(
        f"- Machine: {info['CPU']}, {info['cores']} cores, {info['OS']}, "
        f"Python {info['Python']}, load average at start {info['load average']}"
    )
    print(
        f"- Data: {args.messages:,} messages in {args.chats} chats (the reader is in "
        f"{len(range(0, args.chats, 2))}), {args.files:,} files of {args.pages} pages "
        f"(~{args.pages * 2} k characters each); database {database_size()}"
    )
    print(
        f"- Load: messages {load_seconds:.1f} s; files {files_seconds:.1f} s with their "
        f"index ({args.files / files_seconds:,.0f} files/s)"
    )
    print(
        f"- Each query: warm-up, then {args.runs} alternating timed calls with and without "
        f"the files' source registered; `message_search(limit={LIMIT})`"
    )
    print()
    print(
        markdown_table(
            [
                "query",
                "text",
                "hits",
                "of them in files",
                "messages only p50 ms",
                "with files p50 ms",
                "with files p95 ms",
            ],
            rows,
        )
    )
    print()
    print(
        f"**p50 over all rows: messages only {median(without_all):.2f} ms, with files "
        f"{median(with_files_all):.2f} ms.**"
    )
    print("† fewer hits than the oracle: PostgreSQL's index path stopped at its time bound.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--files", type=int, default=2_000)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with temporary_database(args.database_url, label="bench") as url:
        setup_django(url)
        run(args)


if __name__ == "__main__":
    main()
