"""Benchmark: many schedules due in the same minute, while the turn workers are busy.

    .venv/bin/python bench/schedules_bench.py [--schedules 1000] [--runs 3]
        [--database-url postgres://…]

Needs REDIS_URL (the broker; this script uses a key prefix and queues of its own and
deletes them afterwards). On a throw-away database, N web rooms each get one schedule whose
slot is a whole second just ahead. Two parts per run:

1. **In process** (queries): at the slot, one dispatcher pass
   (`schedules.dispatch.dispatch`) in this process claims every slot, records its run,
   stores the prompt as the schedule's message and queues its turn. Reported: the pass's
   wall time and its queries, total and per started batch (constant: no query per run).
2. **With busy turn workers** (the issue's setting): the processes `make run` starts, as
   subprocesses on the same database and Redis: a turn worker (prefork, concurrency 2)
   whose two slots are held by long person turns (a fake model streaming slowly), and the
   schedules worker (its own queue, solo pool). At the slot this script sends the
   dispatcher task as beat does; the schedules worker runs the pass. Reported: whether every
   slot was claimed, recorded and queued once, p50/p95/max from the slot to the turn queued
   (`Turn.created_at - ScheduleRun.slot_at`, written just before the batch commits and its
   tasks are sent) and from the slot to each task on the broker (the turn queue's length,
   sampled every 10 ms: the busy worker takes none of them), and that both busy turns were
   still running throughout.

Beat sends the dispatcher every SCHEDULES_DISPATCH_SECONDS at a phase of its own, so in
production a slot waits up to that long more before a pass sees it; the bench sends the
task at the slot to measure the dispatcher, not beat's phase.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

BIN = Path(sys.executable).parent
BUSY_TURNS = 2  # the turn worker's concurrency: both slots held


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
    # Created as the service would; the slot is put at the measured second afterwards.
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


def measure(schedules, slot) -> dict:
    from chats.models import Turn
    from schedules.models import ScheduleRun

    runs = ScheduleRun.objects.filter(schedule__in=schedules)
    lateness = [
        (created - slot_at).total_seconds()
        for slot_at, created in runs.values_list("slot_at", "turn__created_at")
        if created is not None
    ]
    return {
        "runs": runs.count(),
        "running": runs.filter(status="running").count(),
        "turns": Turn.objects.filter(chat__schedules__in=schedules).count(),
        "p50": common.percentile(lateness, 50),
        "p95": common.percentile(lateness, 95),
        "max": max(lateness) if lateness else float("nan"),
    }


def in_process(count: int) -> dict:
    """Part 1: one pass in this process, its queries counted."""
    from django.db import connection
    from django.utils import timezone

    from schedules.dispatch import START_CHUNK, dispatch
    from schedules.models import Schedule

    schedules = populate(count)
    slot = timezone.now().replace(microsecond=0) + timedelta(seconds=2)
    Schedule.objects.filter(pk__in=[s.pk for s in schedules]).update(
        next_fire_at=slot, anchor_at=slot
    )
    time.sleep(max(0.0, (slot - timezone.now()).total_seconds()))
    queries = []

    def counted(execute, sql, params, many, context):
        queries.append(1)
        return execute(sql, params, many, context)

    started = time.perf_counter()
    with connection.execute_wrapper(counted):
        result = dispatch()
    wall = time.perf_counter() - started
    batches = -(-result.started // START_CHUNK)
    return {
        **measure(schedules, slot),
        "claimed": result.claimed,
        "wall_s": wall,
        "queries": len(queries),
        "batches": batches,
    }


def start_workers(env: dict, logs: Path, prefix: str) -> list[subprocess.Popen]:
    """The turn worker and the schedules worker as `make run` starts them (no beat)."""
    common_args = ["--loglevel", "WARNING", "--without-gossip", "--without-mingle"]
    commands = {
        "turns": ["-Q", prefix, "-n", f"turns-{prefix}@%h", "--concurrency", str(BUSY_TURNS)],
        "schedules": ["-Q", f"{prefix}-schedules", "-n", f"schedules-{prefix}@%h", "-P", "solo"],
    }
    processes = []
    for name, args in commands.items():
        log = open(logs / f"{name}.log", "ab")  # noqa: SIM115 - owned by Popen
        processes.append(
            subprocess.Popen(
                [str(BIN / "celery"), "-A", "hermes_site", "worker", *args, *common_args],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return processes


def keep_turn_workers_busy(owner_name: str) -> list[int]:
    """Person turns that hold both slots of the turn worker (the model streams for minutes);
    returns the running ones once there are BUSY_TURNS of them."""
    from chats.agent.turns import turn_request
    from chats.models import Turn
    from chats.services import message_ingest

    running = list(Turn.objects.filter(status="running").values_list("id", flat=True))
    for _ in range(BUSY_TURNS - len(running)):
        said = message_ingest(
            channel="web", chat_id=f"busy-{uuid.uuid4().hex[:8]}", user_id=owner_name, text="hi"
        )
        turn_request(message=said.message)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = list(Turn.objects.filter(status="running").values_list("id", flat=True))
        if len(running) >= BUSY_TURNS:
            return running
        time.sleep(0.1)
    raise SystemExit("the turn worker never started the busy turns (see its log)")


def with_busy_workers(count: int, redis_client, prefix: str) -> dict:
    """Part 2: the schedules worker runs the pass while both turn slots are busy."""
    from django.utils import timezone

    from chats.models import Turn
    from schedules.models import Schedule, ScheduleRun
    from schedules.tasks import dispatch as dispatch_task

    busy = keep_turn_workers_busy("bench-person")
    schedules = populate(count)
    ids = [s.pk for s in schedules]
    slot = timezone.now().replace(microsecond=0) + timedelta(seconds=2)
    Schedule.objects.filter(pk__in=ids).update(next_fire_at=slot, anchor_at=slot)
    time.sleep(max(0.0, (slot - timezone.now()).total_seconds()))
    dispatch_task.delay()  # what beat sends; routed to the schedules queue
    # The turn worker is busy: every task the pass sends stays in its queue, so the queue's
    # length over time says when each turn was queued (sampled every 10 ms).
    samples = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        length = redis_client.llen(prefix)
        samples.append(((timezone.now() - slot).total_seconds(), length))
        if length >= count:
            break
        time.sleep(0.01)
    on_broker = [next((t for t, n in samples if n >= k), float("nan")) for k in range(1, count + 1)]
    still_busy = Turn.objects.filter(pk__in=busy, status="running").count() == len(busy)
    redis_client.delete(prefix)  # the queued scheduled turns: nobody runs them here
    return {
        **measure(schedules, slot),
        "claimed": ScheduleRun.objects.filter(schedule_id__in=ids).count(),
        "broker_p50": common.percentile(on_broker, 50),
        "broker_p95": common.percentile(on_broker, 95),
        "broker_max": max(on_broker),
        "busy": still_busy,
    }


def exactly_once(measured: dict, count: int) -> str:
    keys = ("claimed", "runs", "running", "turns")
    return "yes" if all(measured[key] == count for key in keys) else "NO"


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
    from tests.fakes.openai_replies import filler_text, text
    from tests.fakes.openai_server import FakeOpenAI

    # Each busy turn streams for minutes: the turn worker's slots stay held.
    slow = text(filler_text(3000), tokens_per_second=10)
    with (
        common.temporary_database(args.database_url, label="schedules") as url,
        FakeOpenAI(default=slow) as fake,
        tempfile.TemporaryDirectory(prefix="hermes-bench-schedules-logs-") as logs,
    ):
        os.environ.update(LLM_PROVIDER="openai", LLM_BASE_URL=fake.base_url, LLM_MODEL=fake.model)
        common.setup_django(url)
        common.migrate()
        import redis
        from django.conf import settings

        client = redis.Redis.from_url(settings.REDIS_URL)
        env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT), "LOG_LEVEL": "WARNING"}
        workers = start_workers(env, Path(logs), prefix)
        quick, busy = [], []
        try:
            for count in (100, args.schedules):
                for _ in range(args.runs):
                    m = in_process(count)
                    client.delete(prefix)
                    quick.append(
                        [count, exactly_once(m, count), f"{m['wall_s']:.2f}", f"{m['p50']:.2f}",
                         f"{m['p95']:.2f}", f"{m['max']:.2f}", m["queries"], m["batches"]]
                    )  # fmt: skip
                for _ in range(args.runs):
                    m = with_busy_workers(count, client, prefix)
                    busy.append(
                        [count, exactly_once(m, count), "yes" if m["busy"] else "NO",
                         f"{m['p50']:.2f}", f"{m['p95']:.2f}", f"{m['max']:.2f}",
                         f"{m['broker_p50']:.2f}", f"{m['broker_p95']:.2f}",
                         f"{m['broker_max']:.2f}"]
                    )  # fmt: skip
        finally:
            for worker in workers:
                if worker.poll() is None:
                    os.killpg(worker.pid, signal.SIGTERM)
            for worker in workers:
                try:
                    worker.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(worker.pid, signal.SIGKILL)
            keys = list(client.scan_iter(f"{prefix}*", count=1000))
            if keys:
                client.delete(*keys)
            common.close_django_connections()
        print(f"database: {common.database_description()}")
        print("\nIn process (queries of one pass):\n")
        print(
            common.markdown_table(
                ["schedules due", "each once", "pass s", "slot→turn p50 s", "p95 s", "max s",
                 "queries", "batches"],
                quick,
            )
        )  # fmt: skip
        print("\nSchedules worker, both turn slots busy:\n")
        print(
            common.markdown_table(
                ["schedules due", "each once", "turn slots busy throughout",
                 "slot→turn row p50 s", "p95 s", "max s", "slot→task on broker p50 s",
                 "p95 s", "max s"],
                busy,
            )
        )  # fmt: skip
        print(common.markdown_table(["machine", ""], list(common.machine_info().items())))


if __name__ == "__main__":
    main()
