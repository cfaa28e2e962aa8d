"""Ingestion rate through `chats.services.message_ingest`, in one process.

    .venv/bin/python bench/ingest_bench.py [--messages 5000] [--runs 5]
        [--database-url postgres://postgres@127.0.0.1:5432/test]

Each run uses a fresh database and ingests N new messages spread over 50 chats and 200
authors (mixed English/Chinese texts), then delivers the same N again (all duplicates),
then N more of which half are redeliveries. Prints messages/second per scenario (median of
the runs) as a Markdown table. Target: >= 1,000 new messages/s on SQLite.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    MessageTextGenerator,
    database_description,
    machine_info,
    markdown_table,
    median,
    migrate,
    setup_django,
    temporary_database,
)


def deliveries(count: int, offset: int, texts: list[str]) -> list[dict]:
    return [
        {
            "channel": "telegram",
            "chat_id": -1000 - (i % 50),
            "chat_kind": "group",
            "user_id": i % 200,
            "user_name": f"Person {i % 200}",
            "message_id": str(i),
            "text": texts[i % len(texts)],
        }
        for i in range(offset, offset + count)
    ]


def rate(batch: list[dict]) -> float:
    from chats.services import message_ingest

    started = time.perf_counter()
    for fields in batch:
        message_ingest(**fields)
    return len(batch) / (time.perf_counter() - started)


def one_run(count: int, texts: list[str]) -> dict[str, float]:
    from chats.models import Actor, Chat, Message

    Message.objects.all().delete()
    Chat.objects.all().delete()
    Actor.objects.all().delete()
    fresh = deliveries(count, 0, texts)
    results = {"new messages": rate(fresh)}
    results["all duplicates"] = rate(fresh)
    half = deliveries(count // 2, 0, texts) + deliveries(count // 2, count, texts)
    results["50 % duplicates"] = rate(half)
    assert Message.objects.count() == count + count // 2, "every message stored exactly once"
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()

    texts = list(MessageTextGenerator(seed=7).texts(1000))
    with temporary_database(args.database_url, label="ingest") as url:
        setup_django(url)
        migrate()
        runs = [one_run(args.messages, texts) for _ in range(args.runs)]
        backend = database_description()
    rows = [
        (
            scenario,
            args.messages if scenario != "50 % duplicates" else args.messages,
            round(median([r[scenario] for r in runs])),
            round(min(r[scenario] for r in runs)),
            round(max(r[scenario] for r in runs)),
        )
        for scenario in runs[0]
    ]
    info = machine_info()
    print(f"Ingestion through message_ingest on {backend}, {args.runs} runs, one process")
    print(f"Machine: {info['CPU']}, {info['cores']} cores, Python {info['Python']}\n")
    print(markdown_table(["scenario", "messages", "median msg/s", "min", "max"], rows))


if __name__ == "__main__":
    main()
