"""Telegram ingestion: 200 updates per second through the path the bot uses, nothing lost or
doubled.

    .venv/bin/python bench/telegram_bench.py [--rate 200] [--seconds 10] [--runs 3]
        [--path service|webhook|both] [--database-url postgres://postgres@127.0.0.1:5432/test]

Each run feeds `rate × seconds` fresh updates, paced, plus 5 % redeliveries of updates
already sent (what Telegram does after a lost confirmation): private chats (answered: a
turn and an outbox row each), group chatter (stored only), group mentions and forum topics.

- `service`: `bots.services.telegram_update_process` as the long-polling bot runs it: one
  chat's updates in order, chats side by side on 4 lanes (dedupe, access, ingest, turn
  request with its Celery enqueue, outbox row).
- `webhook`: HTTP POSTs to `/telegram/webhook` on a real daphne process (8 connections,
  as Telegram opens several), the same service behind the secret-token check.

Latency is from an update's scheduled arrival to its commit (so a backlog shows up in it).
After each run the database is checked: every unique update processed once, every message
stored once, one turn and one outbox row per answered message. Needs REDIS_URL (Celery's
broker: the turns are enqueued, no worker runs them); `make bench` provides one.
"""

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from common import (  # noqa: E402
    database_description,
    machine_info,
    markdown_table,
    median,
    migrate,
    percentile,
    setup_django,
    temporary_database,
)

TOKEN = "7654321:bench-token"
SECRET = "bench-secret"
BOT_USERNAME = "hermes_bench_bot"
DUPLICATE_SHARE = 0.05


def build_updates(run: int, count: int) -> tuple[list[dict], dict]:
    """`count` fresh updates plus redeliveries, in arrival order, and what must be stored."""
    import random

    rng = random.Random(run)
    base_update = 10_000_000 * (run + 1)
    group_id, forum_id = -1001000000000 - run * 2, -1001000000001 - run * 2
    users = [{"id": 50_000 + i, "is_bot": False, "first_name": f"User{i}"} for i in range(40)]
    message_ids: dict[int, int] = {}
    fresh, answered = [], 0
    for index in range(count):
        user = rng.choice(users)
        kind = rng.random()
        thread = None
        if kind < 0.4:
            chat = {"id": user["id"] + run * 1000, "type": "private", "first_name": "U"}
            text, answers = f"question {index} from a private chat", True
        elif kind < 0.8:
            chat = {"id": group_id, "type": "supergroup", "title": "Ops"}
            text, answers = f"group chatter {index}", False
        elif kind < 0.9:
            chat = {"id": group_id, "type": "supergroup", "title": "Ops"}
            text, answers = f"@{BOT_USERNAME} group question {index}", True
        else:
            chat = {"id": forum_id, "type": "supergroup", "title": "Eng", "is_forum": True}
            thread = rng.choice([5, 9, 13])
            text, answers = f"topic message {index}", False
        message_ids[chat["id"]] = message_ids.get(chat["id"], 0) + 1
        message = {
            "message_id": message_ids[chat["id"]],
            "from": {**user, "id": chat["id"]} if chat["type"] == "private" else user,
            "chat": chat,
            "date": int(time.time()),
            "text": text,
        }
        if text.startswith("@"):
            message["entities"] = [
                {"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}
            ]
        if thread is not None:
            message.update(message_thread_id=thread, is_topic_message=True)
        fresh.append({"update_id": base_update + index, "message": message})
        answered += answers
    arrivals = list(fresh)
    for _ in range(int(count * DUPLICATE_SHARE)):
        position = rng.randrange(1, len(arrivals))
        arrivals.insert(position, rng.choice(arrivals[:position]))
    chats = sorted({str(update["message"]["chat"]["id"]) for update in fresh})
    return arrivals, {"unique": count, "answered": answered, "base": base_update, "chats": chats}


def paced(updates: list[dict], rate: float):
    """Yield (scheduled time, update) at `rate` per second (as fast as possible if 0)."""
    start = time.perf_counter() + 0.05
    for index, update in enumerate(updates):
        due = start + index / rate if rate else time.perf_counter()
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        yield due, update


def run_service(updates: list[dict], rate: float, lanes: int = 4) -> tuple[list[float], float]:
    """The polling bot's path: updates of one chat in order on one lane, chats side by side
    on `lanes` threads (bots.bridge.UPDATE_LANES), each with its own connection."""
    from django.db import close_old_connections

    from bots.services import telegram_update_process

    inboxes: list[queue.Queue] = [queue.Queue() for _ in range(lanes)]
    latencies: list[float] = []
    finished = [0.0]
    lock = threading.Lock()

    def consume(inbox: queue.Queue):
        while (item := inbox.get()) is not None:
            due, update = item
            telegram_update_process(update)
            now = time.perf_counter()
            with lock:
                finished[0] = max(finished[0], now)
                latencies.append((now - due) * 1000)
        close_old_connections()

    workers = [threading.Thread(target=consume, args=(inbox,)) for inbox in inboxes]
    for worker in workers:
        worker.start()
    first = None
    for due, update in paced(updates, rate):
        first = first or due
        inboxes[update["message"]["chat"]["id"] % lanes].put((due, update))
    for inbox in inboxes:
        inbox.put(None)
    for worker in workers:
        worker.join()
    return latencies, len(updates) / (finished[0] - first)


def run_webhook(updates: list[dict], rate: float, url: str, connections: int = 8):
    """Telegram's path in webhook mode: concurrent HTTP POSTs to daphne."""
    inbox: queue.Queue = queue.Queue()
    latencies: list[float] = []
    failures: list[str] = []
    finished = [0.0]
    lock = threading.Lock()

    def post():
        while (item := inbox.get()) is not None:
            due, update = item
            request = urllib.request.Request(
                url,
                data=json.dumps(update).encode(),
                headers={
                    "Content-Type": "application/json",
                    "X-Telegram-Bot-Api-Secret-Token": SECRET,
                },
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    response.read()
            except Exception as exc:  # noqa: BLE001 - counted and reported
                failures.append(str(exc))
                continue
            now = time.perf_counter()
            with lock:
                finished[0] = max(finished[0], now)
                latencies.append((now - due) * 1000)

    threads = [threading.Thread(target=post) for _ in range(connections)]
    for thread in threads:
        thread.start()
    first = None
    for due, update in paced(updates, rate):
        first = first or due
        inbox.put((due, update))
    for _ in threads:
        inbox.put(None)
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(f"{len(failures)} webhook POSTs failed, e.g. {failures[0]}")
    return latencies, len(updates) / (finished[0] - first)


def verify(expected: dict) -> int:
    """Every unique update once, every message once, one turn and outbox row per answer."""
    from django.db.models import Count

    from bots.models import OutboundMessage, ProcessedUpdate
    from chats.models import Message, Turn

    base = expected["base"]
    processed = ProcessedUpdate.objects.filter(
        update_id__gte=base, update_id__lt=base + 10_000_000
    ).count()
    chats = {"chat__channel": "telegram", "chat__external_id__in": expected["chats"]}
    stored = Message.objects.filter(role="user", **chats)
    turns = Turn.objects.filter(**chats).count()
    replies = OutboundMessage.objects.filter(kind="reply", **chats).count()
    problems = []
    if processed != expected["unique"]:
        problems.append(f"{processed} updates processed, {expected['unique']} sent")
    if stored.count() != expected["unique"]:
        problems.append(f"{stored.count()} messages stored, {expected['unique']} sent")
    if not turns == replies == expected["answered"]:
        problems.append(f"{turns} turns, {replies} replies, {expected['answered']} asked")
    doubled = stored.values("chat_id", "external_id").annotate(n=Count("id")).filter(n__gt=1)
    if doubled.exists():
        problems.append(f"{doubled.count()} messages stored twice")
    if problems:
        raise SystemExit("LOST OR DOUBLED: " + "; ".join(problems))
    return replies


def start_daphne(database_url: str) -> tuple[subprocess.Popen, str]:
    from hermes_site.embedded_valkey import free_port

    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_WEBHOOK_SECRET": SECRET,
        "TELEGRAM_ALLOWED_CHATS": os.environ["TELEGRAM_ALLOWED_CHATS"],
        "TELEGRAM_ALLOWED_USERS": os.environ["TELEGRAM_ALLOWED_USERS"],
        "LOG_LEVEL": "WARNING",
    }
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "daphne"),
            "-p",
            str(port),
            "hermes_site.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/telegram/webhook"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
        except urllib.error.HTTPError:
            return process, url  # 405 for GET: it is up
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("daphne did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200, help="updates per second (0: unpaced)")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--path", choices=["service", "webhook", "both"], default="both")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--lanes", type=int, default=None, help="default: the bot's")
    args = parser.parse_args()
    os.environ.setdefault("REDIS_KEY_PREFIX", f"hermes-bench-{os.getpid()}")
    os.environ["TELEGRAM_BOT_TOKEN"] = TOKEN
    groups = [str(-1001000000000 - run * 2 - k) for run in range(2 * args.runs + 2) for k in (0, 1)]
    os.environ["TELEGRAM_ALLOWED_CHATS"] = ",".join(groups)
    os.environ["TELEGRAM_ALLOWED_USERS"] = ",".join(
        str(50_000 + i + run * 1000) for run in range(2 * args.runs + 2) for i in range(40)
    )
    count = int(args.rate * args.seconds) if args.rate else int(200 * args.seconds)
    paths = ["service", "webhook"] if args.path == "both" else [args.path]
    results = {}
    with temporary_database(args.database_url, label="telegram") as url:
        setup_django(url)
        migrate()
        from bots.models import BotState

        BotState.objects.create(bot_id=7654321, username=BOT_USERNAME)
        from bots.bridge import update_lanes

        lanes = args.lanes or update_lanes()
        run_number = 0
        for path in paths:
            daphne, webhook_url = start_daphne(url) if path == "webhook" else (None, None)
            try:
                samples = []
                for _ in range(args.runs):
                    updates, expected = build_updates(run_number, count)
                    run_number += 1
                    if path == "service":
                        latencies, throughput = run_service(updates, args.rate, lanes)
                    else:
                        latencies, throughput = run_webhook(updates, args.rate, webhook_url)
                    replies = verify(expected)
                    samples.append(
                        (throughput, percentile(latencies, 50), percentile(latencies, 95))
                    )
                    print(
                        f"  {path} run {len(samples)}: {len(updates)} deliveries "
                        f"({expected['unique']} unique), {throughput:.0f}/s, "
                        f"p50 {samples[-1][1]:.1f} ms, p95 {samples[-1][2]:.1f} ms, "
                        f"{replies} replies queued; nothing lost or doubled",
                        flush=True,
                    )
                results[path] = samples
            finally:
                if daphne is not None:
                    daphne.terminate()
                    daphne.wait(timeout=10)
        backend = database_description()
        _clean_redis()

    info = machine_info()
    rate = f"{args.rate:g} updates/s" if args.rate else "unpaced"
    print(
        f"\nTelegram ingestion on {backend}: {count} updates + {DUPLICATE_SHARE:.0%} "
        f"redeliveries per run at {rate}, median of {args.runs} runs"
    )
    print(f"Machine: {info['CPU']}, {info['cores']} cores, Python {info['Python']}\n")
    labels = {
        "service": f"bot path (telegram_update_process, {lanes} lane{'s' if lanes > 1 else ''})",
        "webhook": "webhook on daphne (HTTP, 8 connections)",
    }
    rows = [
        (
            labels[path],
            median([s[0] for s in samples]),
            median([s[1] for s in samples]),
            median([s[2] for s in samples]),
            "none",
        )
        for path, samples in results.items()
    ]
    print(
        markdown_table(["path", "sustained updates/s", "p50 ms", "p95 ms", "lost or doubled"], rows)
    )


def _clean_redis() -> None:
    """The turns enqueued for Celery (no worker runs them here) go with the bench's prefix."""
    import redis
    from django.conf import settings

    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1)
        prefix = os.environ["REDIS_KEY_PREFIX"]
        for key in client.scan_iter(f"*{prefix}*", count=1000):
            client.delete(key)
    except redis.RedisError:
        pass


if __name__ == "__main__":
    main()
