"""Benchmark: many schedules due in the same minute, one dispatcher pass.

    .venv/bin/python bench/schedules_bench.py [--schedules 1000] [--runs 3]
        [--database-url postgres://…]

Needs REDIS_URL (each requested turn clears its interrupt flag and is enqueued on the
broker; this script uses a queue of its own and deletes it afterwards). On a throw-away
database, N web rooms each get one schedule whose slot is "now"; one dispatcher pass
(`schedules.dispatch.dispatch`) then claims every slot, records its run, stores the prompt
as the schedule's message and requests its turn. Reported per run: whether every slot was
claimed and every turn queued exactly once, the pass's wall time, p50/p95/max from the slot
time to the turn queued (`Turn.created_at - ScheduleRun.slot_at`), and the queries of the
pass, total and per schedule (the same for 100 and for N schedules: no query grows with
the batch beyond one per run). Turns are not run: no worker takes the queue, so this
measures the dispatcher alone, not a machine whose turn workers are busy.
"""

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402


def populate(count: int):
    from django.contrib.auth import get_user_model

    from chats.models import Chat, ChatMember
    from schedules.models import Schedule

    owner = get_user_model().objects.create_user(username=f"owner{uuid.uuid4().hex[:6]}")
    tag = uuid.uuid4().hex[:8]
    chats = Chat.objects.bulk_create(
        Chat(chat_key=f"web:{tag}-{i}", channel="web", external_id=f"{tag}-{i}", kind="room")
        for i in range(count)
    )
    ChatMember.objects.bulk_create(ChatMember(chat=chat, person=owner) for chat in chats)
    # Created as the service would; the slot is put at "now" afterwards, all in one minute.
    return Schedule.objects.bulk_create(
        Schedule(
            owner=owner,
            chat=chat,
            prompt=f"report {i}",
            kind="interval",
            interval_minutes=60,
            timezone="UTC",
        )
        for i, chat in enumerate(chats)
    )


def one_run(count: int) -> dict:
    from django.db import connection
    from django.utils import timezone

    from chats.models import Turn
    from schedules.dispatch import dispatch
    from schedules.models import Schedule, ScheduleRun

    schedules = populate(count)
    slot = timezone.now().replace(microsecond=0)
    Schedule.objects.filter(pk__in=[s.pk for s in schedules]).update(
        next_fire_at=slot, anchor_at=slot
    )
    queries = []

    def counted(execute, sql, params, many, context):
        queries.append(1)
        return execute(sql, params, many, context)

    started = time.perf_counter()
    with connection.execute_wrapper(counted):
        result = dispatch()
    wall = time.perf_counter() - started
    runs = ScheduleRun.objects.filter(schedule__in=schedules)
    lateness = [
        (created - slot_at).total_seconds()
        for slot_at, created in runs.values_list("slot_at", "turn__created_at")
        if created is not None
    ]
    turns = Turn.objects.filter(chat__schedules__in=schedules).count()
    return {
        "claimed": result.claimed,
        "runs": runs.count(),
        "running": runs.filter(status="running").count(),
        "turns": turns,
        "wall_s": wall,
        "p50": common.percentile(lateness, 50),
        "p95": common.percentile(lateness, 95),
        "max": max(lateness) if lateness else float("nan"),
        "queries": len(queries),
        "per_schedule": len(queries) / count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    if not os.environ.get("REDIS_URL"):
        raise SystemExit("set REDIS_URL (turns are enqueued on the broker)")
    prefix = f"hermes-bench-schedules-{os.getpid()}"
    os.environ["REDIS_KEY_PREFIX"] = prefix
    os.environ["SCHEDULES_MAX_PER_PERSON"] = str(args.schedules * 10)
    with common.temporary_database(args.database_url, label="schedules") as url:
        common.setup_django(url)
        common.migrate()
        from django.conf import settings

        from hermes_site.celery import app

        app.conf.task_default_queue = prefix
        rows = []
        try:
            for count in (100, args.schedules):
                for _ in range(args.runs):
                    measured = one_run(count)
                    exact = (
                        measured["claimed"]
                        == measured["runs"]
                        == measured["running"]
                        == measured["turns"]
                        == count
                    )
                    rows.append(
                        [
                            count,
                            "yes" if exact else "NO",
                            f"{measured['wall_s']:.2f}",
                            f"{measured['p50']:.2f}",
                            f"{measured['p95']:.2f}",
                            f"{measured['max']:.2f}",
                            measured["queries"],
                            f"{measured['per_schedule']:.1f}",
                        ]
                    )
        finally:
            import redis

            client = redis.Redis.from_url(settings.REDIS_URL)
            keys = list(client.scan_iter(f"{prefix}*", count=1000))
            if keys:
                client.delete(*keys)
        print(f"database: {common.database_description()}")
        print(
            common.markdown_table(
                [
                    "schedules due",
                    "each claimed, recorded, queued once",
                    "pass s",
                    "slot→turn p50 s",
                    "p95 s",
                    "max s",
                    "queries",
                    "per schedule",
                ],
                rows,
            )
        )
        print(common.markdown_table(["machine", ""], list(common.machine_info().items())))


if __name__ == "__main__":
    main()
