"""Benchmark: the usage page over a hub with 1,000,000 turns.

    .venv/bin/python bench/usage_bench.py [--turns 1000000] [--people 200] [--chats 1000]
        [--days 365] [--runs 30] [--database-url postgres://…] [--keep-database URL]

On a throw-away database: `--people` people, `--chats` web rooms (each owned by one
person), and `--turns` turns spread evenly over the last `--days` days, each with its
trigger message, its turn row and its usage record (three models, two priced), inserted
with bulk inserts; a tool call record for every fifth turn. The daily sums are then built
by `usage_rebuild` (timed: what a full rebuild costs at this size, every table), then
vacuumed and analysed (as autovacuum would after it, untimed), and
checked against the turns and the ledger (UsageDay, UsageHubDay, UsagePersonDay and
UsageChatDay: tokens, calls and cost). Then the pages are
fetched through Django's test client (middleware, session, template, everything but the
network) as staff, as a person and as a chat owner; p50 and p95 of `--runs` fetches each.
Prints Markdown tables and the machine.

`--keep-database URL` (a sqlite:///path or a postgres:// URL of a database of its own)
seeds that database once and keeps it: a later run with the same URL migrates it, skips
the seeding (the turns are there) and rebuilds the sums, so code can be re-measured at a
million turns without twelve minutes of seeding each time.
"""

import argparse
import contextlib
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

BATCH = 10_000
MODELS = ("big-model", "small-model", "unpriced-model")


def seed(turns: int, people: int, chats: int, days: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from chats.models import Actor, Chat, ChatMember, Message, Turn
    from usage.models import Kind, ModelPrice, UsageRecord

    started = time.perf_counter()
    rng = random.Random(25)
    User = get_user_model()
    User.objects.bulk_create(
        [User(username=f"person{n}", is_staff=(n == 0)) for n in range(people)]
    )
    person_ids = list(User.objects.order_by("id").values_list("id", flat=True))
    Chat.objects.bulk_create(
        [
            Chat(chat_key=f"web:room{n}", channel="web", external_id=f"room{n}", kind="group",
                 title=f"Room {n}")
            for n in range(chats)
        ]
    )  # fmt: skip
    chat_ids = list(Chat.objects.order_by("id").values_list("id", flat=True))
    owner_of = {chat: person_ids[i % people] for i, chat in enumerate(chat_ids)}
    ChatMember.objects.bulk_create(
        [
            ChatMember(chat_id=chat, person_id=owner, role="owner")
            for chat, owner in owner_of.items()
        ]
    )
    Actor.objects.bulk_create(
        [
            Actor(channel="web", external_id=str(pid), display_name=f"p{pid}", person_id=pid)
            for pid in person_ids
        ]
    )
    actor_of = dict(Actor.objects.values_list("person_id", "id"))
    # One trigger message per room stands for all its turns: the usage pages never read
    # messages, and each stored message costs the search index's triggers.
    Message.objects.bulk_create(
        [
            Message(chat_id=chat, actor_id=actor_of[owner], role="user", text="hi",
                    external_id=f"m{chat}", token_count=1)
            for chat, owner in owner_of.items()
        ]
    )  # fmt: skip
    trigger_of = dict(Message.objects.values_list("chat_id", "id"))
    ModelPrice.objects.create(
        model="big-model", input_per_million=3, output_per_million=15,
        valid_from=datetime(2000, 1, 1).date(),
    )  # fmt: skip
    ModelPrice.objects.create(
        model="small-model", input_per_million="0.15", output_per_million="0.60",
        valid_from=datetime(2000, 1, 1).date(),
    )  # fmt: skip
    now = datetime.now(UTC).replace(microsecond=0)
    first = now - timedelta(days=days)
    step = (now - first) / turns
    turn_fields = {
        "status": "completed", "provider": "bench", "iterations": 1, "error": "",
        "interrupt_reason": "", "wait_reason": "", "prompt_report": {}, "worker": "",
    }  # fmt: skip
    done, record_id = 0, 0
    while done < turns:
        count = min(BATCH, turns - done)
        turn_rows, record_rows = [], []
        for n in range(done, done + count):
            chat = chat_ids[rng.randrange(len(chat_ids))]
            person = owner_of[chat] if rng.random() < 0.8 else rng.choice(person_ids)
            at, model = first + step * n, rng.choice(MODELS)
            prompt, completion = 800 + n % 400, 100 + n % 90
            turn_id = n + 1  # the tables start empty: ids are ours to give
            turn_rows.append(
                {**turn_fields, "id": turn_id, "chat_id": chat, "trigger_id": trigger_of[chat],
                 "model": model, "prompt_tokens": prompt, "completion_tokens": completion,
                 "created_at": at, "finished_at": at}
            )  # fmt: skip
            record_id += 1
            record_rows.append(
                {"id": record_id, "at": at, "day": at.date(), "kind": Kind.TURN, "model": model,
                 "person_id": person, "chat_id": chat, "turn_id": turn_id, "calls": 1,
                 "prompt_tokens": prompt, "completion_tokens": completion, "detail": ""}
            )  # fmt: skip
            if n % 5 == 0:
                record_id += 1
                record_rows.append(
                    {"id": record_id, "at": at, "day": at.date(), "kind": Kind.TOOL,
                     "model": "", "person_id": person, "chat_id": chat, "turn_id": turn_id,
                     "calls": 1, "duration_ms": 40, "detail": "search"}
                )  # fmt: skip
        with transaction.atomic():
            fast_insert(Turn, turn_rows)
            fast_insert(UsageRecord, record_rows)
        done += count
        if done % 100_000 == 0:
            print(f"  seeded {done:,} turns", file=sys.stderr, flush=True)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for model in (Turn, UsageRecord):
                table = model._meta.db_table
                cursor.execute(
                    f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                    f"(SELECT MAX(id) FROM {table}))"
                )
    seeded_s = time.perf_counter() - started
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
    else:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return {"seed_s": seeded_s, "staff": person_ids[0], "person": person_ids[1]}


def fast_insert(model, rows: list[dict]) -> None:
    """Insert rows with one executemany (bulk_create compiles SQL per small batch, which
    dominates at a million rows); fields left out take their model default."""
    from django.db import connection

    fields = [f for f in model._meta.concrete_fields]
    defaults = {f.attname: f.get_default() for f in fields}
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    table = connection.ops.quote_name(model._meta.db_table)
    sql = f"INSERT INTO {table} ({columns}) VALUES ({marks})"
    values = [
        [f.get_db_prep_save(row.get(f.attname, defaults[f.attname]), connection) for f in fields]
        for row in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, values)


def rebuild() -> tuple[float, int]:
    from usage.services import usage_rebuild

    started = time.perf_counter()
    rows = usage_rebuild()  # reprices every record from the prices, then sums them
    return time.perf_counter() - started, rows


def settle() -> None:
    """What autovacuum does after a rebuild of this size, done now: the rebuilt tables'
    statistics, and (PostgreSQL) their visibility map, without which an index-only scan
    reads the table too and the planner misjudges how many rows a range holds."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")


def check_exact() -> bool:
    """Every table of sums holds the ledger's figures: the tokens of the turns and the
    costs of the records (the person's and chat's tables where they exist)."""
    from django.apps import apps
    from django.db.models import Sum

    from chats.models import Turn
    from usage.models import UsageDay, UsageHubDay, UsageRecord

    tables = [UsageDay, UsageHubDay]
    tables += [apps.get_model("usage", name) for name in ("UsagePersonDay", "UsageChatDay")
               if name.lower() in apps.all_models["usage"]]  # fmt: skip
    turns = Turn.objects.aggregate(p=Sum("prompt_tokens"))
    ledger = UsageRecord.objects.aggregate(c=Sum("cost_nanos"), n=Sum("calls"))
    for table in tables:
        sums = table.objects.aggregate(p=Sum("prompt_tokens"), c=Sum("cost_nanos"), n=Sum("calls"))
        if (sums["p"], sums["c"], sums["n"]) != (turns["p"], ledger["c"], ledger["n"]):
            print(f"  NOT EXACT: {table.__name__}", file=sys.stderr)
            return False
    print(f"  exact: {', '.join(t.__name__ for t in tables)}", file=sys.stderr)
    return True


def measure(client, path: str, runs: int) -> tuple[float, float, int]:
    def fetch():
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        return response

    size = len(fetch().content)
    timings = common.timings_ms(fetch, runs=runs, warmup=2)
    return common.percentile(timings, 50), common.percentile(timings, 95), size


def measure_recording(person_id: int, runs: int) -> tuple[float, float]:
    """What recording one piece of work costs on this hub: a tool call record (no tokens,
    so the checks against the turns still hold), each its own transaction, added to the
    day's existing rows of every table of sums."""
    from chats.models import ChatMember
    from usage.models import Kind
    from usage.services import usage_record

    chat_id = ChatMember.objects.filter(person_id=person_id).values_list("chat_id", flat=True)[0]

    def record():
        usage_record(kind=Kind.TOOL, chat_id=chat_id, person_id=person_id, duration_ms=40,
                     detail="bench")  # fmt: skip

    timings = common.timings_ms(record, runs=runs, warmup=2)
    return common.percentile(timings, 50), common.percentile(timings, 95)


def profile(client, path: str) -> None:
    """Each query of one fetch and its time (--profile), slowest first."""
    from django.db import connection

    seen = []

    def timed(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            seen.append(((time.perf_counter() - started) * 1000, sql[:160]))

    with connection.execute_wrapper(timed):
        started = time.perf_counter()
        client.get(path)
        total = (time.perf_counter() - started) * 1000
    print(f"{path}: {total:.1f} ms, {len(seen)} queries, {sum(t for t, _ in seen):.1f} ms in SQL")
    for took, sql in sorted(seen, reverse=True)[:5]:
        print(f"  {took:7.1f} ms  {sql}")


@contextlib.contextmanager
def kept_database(url: str):
    """A database that outlives the run (created on a PostgreSQL server when missing)."""
    if url.startswith(("postgres://", "postgresql://")):
        from urllib.parse import urlsplit, urlunsplit

        import psycopg

        parts = urlsplit(url)
        name = parts.path.lstrip("/")
        with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as c:
            if not c.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url
    finally:
        common.close_django_connections()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000_000)
    parser.add_argument("--people", type=int, default=200)
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--profile", action="store_true", help="print each page's queries")
    parser.add_argument("--keep-database", default=None, help="seed once into this URL, reuse")
    parser.add_argument("--seed-only", action="store_true", help="seed, then stop")
    args = parser.parse_args()
    if args.keep_database:
        database = kept_database(args.keep_database)
    else:
        database = common.temporary_database(args.database_url, label="usage")
    with database as url:
        common.setup_django(url)
        common.migrate()
        from django.contrib.auth import get_user_model
        from django.test import Client
        from django.test.utils import setup_test_environment

        from chats.models import Turn
        from usage.models import UsageDay, UsageHubDay, UsageRecord

        setup_test_environment()  # the test client's host and template signals
        if Turn.objects.count() == args.turns:
            ids = list(get_user_model().objects.order_by("id").values_list("id", flat=True)[:2])
            seeded = {"seed_s": float("nan"), "staff": ids[0], "person": ids[1]}
            print("  seeded before: reused", file=sys.stderr, flush=True)
        else:
            seeded = seed(args.turns, args.people, args.chats, args.days)
            print(f"  seeded in {seeded['seed_s']:.0f} s", file=sys.stderr, flush=True)
        if args.seed_only:
            return
        rebuild_s, day_rows = rebuild()
        print(f"  rebuilt in {rebuild_s:.0f} s", file=sys.stderr, flush=True)
        settle()
        exact = check_exact()
        User = get_user_model()
        staff = User.objects.get(pk=seeded["staff"])
        person = User.objects.get(pk=seeded["person"])
        clients = {}
        for name, who in (("staff", staff), ("person (owns 5 rooms)", person)):
            client = Client()
            client.force_login(who)
            clients[name] = client
        year_start = (datetime.now(UTC) - timedelta(days=364)).date().isoformat()
        cases = [
            ("staff", "/usage/", "by day, last 30 days"),
            ("staff", "/usage/?by=chat", "by chat, last 30 days"),
            ("staff", "/usage/?by=person", "by person, last 30 days"),
            ("staff", "/usage/?by=model", "by model, last 30 days"),
            ("staff", f"/usage/?by=day&start={year_start}", "by day, 365 days"),
            ("staff", "/usage/?by=person&format=csv", "CSV by person, 30 days"),
            ("staff", "/usage/records/", "records, first page"),
            ("person (owns 5 rooms)", "/usage/", "by day, last 30 days"),
            ("person (owns 5 rooms)", f"/usage/?by=chat&start={year_start}", "by chat, 365 days"),
            ("person (owns 5 rooms)", "/usage/records/", "records, first page"),
        ]
        rows = []
        for who, path, what in cases:
            if args.profile:
                profile(clients[who], path)
            p50, p95, size = measure(clients[who], path, args.runs)
            rows.append([who, what, f"{p50:.1f}", f"{p95:.1f}", f"{size / 1024:.0f}"])
        p50, p95 = measure_recording(seeded["person"], args.runs)
        rows.append(["(recording)", "one usage record, its own transaction", f"{p50:.1f}",
                     f"{p95:.1f}", ""])  # fmt: skip
        print(f"database: {common.database_description()}")
        print(
            common.markdown_table(
                ["turns", "usage records", "daily rows", "hub daily rows", "seed s",
                 "usage_rebuild s", "sums exact"],
                [[
                    f"{args.turns:,}", f"{UsageRecord.objects.count():,}",
                    f"{UsageDay.objects.count():,}", f"{UsageHubDay.objects.count():,}",
                    f"{seeded['seed_s']:.0f}",
                    f"{rebuild_s:.1f}", "yes" if exact and day_rows else "NO",
                ]],
            )
        )  # fmt: skip
        print(common.markdown_table(["viewer", "page", "p50 ms", "p95 ms", "KiB"], rows))
        print(common.markdown_table(["machine", ""], list(common.machine_info().items())))


if __name__ == "__main__":
    main()
