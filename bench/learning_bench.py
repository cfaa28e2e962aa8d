"""Benchmark: what the learning loop (counters, background reviews) costs a chat.

    .venv/bin/python bench/learning_bench.py [--turns 40] [--runs 5] [--pace 40]
        [--parts counters,review,tokens] [--database-url postgres://…]

Needs REDIS_URL (turn events, interrupt flags, the review queue); `make bench` provides one.
On a throw-away database, turns run in this process as a worker runs them, against the
test suite's fake OpenAI server on loopback (instant replies). Three parts:

* counters: the learning receiver's work (`learning_turn_finished`, run after the turn's
  outcome is committed and `turn.finished` is published) per completed turn, the time until
  people see the reply as final (ingest → `turn.finished` published) and a whole turn
  (ingest → the receivers done; one tool call and a reply) with the receiver connected vs
  disconnected, alternating turn by turn (`--turns` of each per run);
* review running: the next turn's latency in the same chat while a review of that chat
  runs in another process (as the review worker: its own fake model, `--pace` tokens/s,
  proposing a skill) vs with no review, alternating blocks; only turns that started and
  ended while the review was running count;
* tokens: the deploy story of `tests/learning/test_story.py` for 10 turns at the default
  intervals (10 / 10), its cluster the story's MCP server (`tests/learning/story_server.py`,
  streamable HTTP on loopback), every queued review run in-process at once and its proposals
  approved; the prompt and completion tokens recorded on the Review rows (as the fake
  server counts them: tiktoken cl100k over the messages and the tools' JSON).

Medians over `--runs` runs; prints Markdown tables and the machine.
"""

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

RECEIVER_UID = "learning-count-turn"
VERBOSE = [False]  # --verbose: each run's medians as they come
FINAL_EVENT_AT = [0.0]  # perf_counter() when the last turn.finished was published


@contextlib.contextmanager
def final_event_clock():
    """Note when each `turn.finished` is published (what people wait for)."""
    from chats.agent import events

    original = events.publish

    def publish(chat_id, event_type, **data):
        event = original(chat_id, event_type, **data)
        if event_type == "turn.finished":
            FINAL_EVENT_AT[0] = time.perf_counter()
        return event

    events.publish = publish
    try:
        yield
    finally:
        events.publish = original


TIMED_UID = "bench-timed-learning"
STORY = [
    ("shop", "1.4.0"), ("billing", "2.0.1"), ("invoices", "0.3.0"), ("search", "0.9.0"),
    ("shop", "1.4.1"), ("billing", "2.0.2"), ("invoices", "0.3.1"), ("search", "0.9.1"),
    ("shop", "1.5.0"), ("billing", "2.1.0"),
]  # fmt: skip


def quiet_resets() -> None:
    """The fake server prints a traceback when a client drops an idle keep-alive connection
    (the SDK's sync stream does not drain the body after [DONE], so every model call opens
    a new connection): not an error here."""
    from tests.fakes.http import FakeHTTPServer

    original = FakeHTTPServer.handle_error

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            original(self, request, client_address)

    FakeHTTPServer.handle_error = handle_error


def configure_model(base_url: str, model: str) -> None:
    from django.conf import settings

    from chats.agent.llm.factory import reset_provider_cache

    settings.LLM_PROVIDER = "openai"
    settings.LLM_BASE_URL = base_url
    settings.LLM_MODEL = model
    settings.LLM_CONTEXT_TOKENS = 128_000
    settings.LLM_MAX_RETRIES = 0
    reset_provider_cache()


def quick_model(body: dict):
    """A plain turn: one current_time call, then a short answer."""
    from tests.fakes import openai_server as fake_openai
    from tests.learning.story_tools import request_steps

    _, steps = request_steps(body)
    if not steps:
        return fake_openai.tool_calls([(f"t{time.monotonic_ns()}", "current_time", {})])
    return fake_openai.text("It is a quarter past ten; the standup starts in 15 minutes.")


class Speaker:
    """Alice in her Telegram DM `chat_id`: says things and runs each turn here."""

    FRESH_EVERY = 10  # timed turns start a fresh context (/new) this often: a steady size

    def __init__(self, person, chat_id: str):
        self.person, self.chat_id, self.sent, self.since_reset = person, chat_id, 0, 0

    def turn(self, text: str):
        from chats.agent.llm import get_provider
        from chats.agent.loop import run_claimed_turn
        from chats.agent.turns import message_received, turn_claim
        from chats.services import message_ingest

        self.sent += 1
        result = message_ingest(
            channel="telegram",
            chat_id=self.chat_id,
            user_id="10",
            user_name="Alice",
            chat_kind="dm",
            message_id=f"{self.chat_id}-{self.sent}",
            text=text,
            person=self.person,
        )
        claim = turn_claim(turn_id=message_received(result, enqueue=False).pk, worker="bench")
        turn = run_claimed_turn(claim.turn, provider=get_provider())
        assert turn.status == "completed", turn.error
        return turn

    def timed_turn(self, text: str) -> float:
        """Milliseconds from ingesting `text` to the turn's end (reply stored, announced,
        the receivers of turn_finished run). At most FRESH_EVERY turns of context."""
        return self.timed_turn_visible(text)[0]

    def timed_turn_visible(self, text: str) -> tuple[float, float]:
        """(the whole turn as `timed_turn`, the time until `turn.finished` was published:
        when people see the reply as final), in milliseconds."""
        if self.since_reset >= self.FRESH_EVERY:
            self.new_context()
        self.since_reset += 1
        started = time.perf_counter()
        FINAL_EVENT_AT[0] = 0.0
        self.turn(text)
        ended = time.perf_counter()
        return (ended - started) * 1000, (FINAL_EVENT_AT[0] - started) * 1000

    @property
    def chat(self):
        from chats.models import Chat

        return Chat.objects.get(channel="telegram", external_id=self.chat_id)

    def new_context(self) -> None:
        from chats.services import chat_reset

        chat_reset(chat=self.chat)
        self.since_reset = 0


def alice():
    from django.contrib.auth import get_user_model

    from chats.services import actor_get_or_create

    person = get_user_model().objects.create_user("bench-alice")
    actor_get_or_create(channel="telegram", user_id="10", display_name="Alice", person=person)
    return person


@contextlib.contextmanager
def collected_reviews():
    """Queued reviews collected here (their ids) instead of being sent to the broker."""
    from learning import tasks

    ids: list[int] = []
    original = tasks.run_review.delay
    tasks.run_review.delay = ids.append
    try:
        yield ids
    finally:
        tasks.run_review.delay = original


# --- 1. the counters --------------------------------------------------------------------


def counters_part(person, fake, turns: int, runs: int) -> list[list]:
    from chats.signals import turn_finished
    from learning.services import learning_turn_finished

    receiver_ms: list[float] = []
    review_ms: list[float] = []

    def timed(sender, turn, status, **kwargs):
        started = time.perf_counter()
        queued = learning_turn_finished(turn=turn, status=status)
        (review_ms if queued else receiver_ms).append((time.perf_counter() - started) * 1000)

    fake.default = quick_model
    speaker = Speaker(person, "bench-counters")
    for _ in range(5):  # warm-up: connections, caches, the tokenizer, ChatLearning's row
        speaker.turn("What time is it?")
    turn_finished.disconnect(dispatch_uid=RECEIVER_UID)
    with_p50, without_p50, receiver_p50, receiver_p95 = [], [], [], []
    seen_with_p50, seen_without_p50 = [], []
    try:
        for run in range(runs):
            samples = {True: [], False: []}
            seen = {True: [], False: []}
            receiver_ms.clear()
            for n in range(2 * turns):  # interleaved turn by turn: any drift hits both
                connected = (n + run) % 2 == 0
                if connected:
                    turn_finished.connect(timed, dispatch_uid=TIMED_UID, weak=False)
                else:
                    turn_finished.disconnect(dispatch_uid=TIMED_UID)
                with final_event_clock():
                    whole, visible = speaker.timed_turn_visible("What time is it?")
                samples[connected].append(whole)
                seen[connected].append(visible)
            turn_finished.disconnect(dispatch_uid=TIMED_UID)
            with_p50.append(common.percentile(samples[True], 50))
            without_p50.append(common.percentile(samples[False], 50))
            seen_with_p50.append(common.percentile(seen[True], 50))
            seen_without_p50.append(common.percentile(seen[False], 50))
            receiver_p50.append(common.percentile(receiver_ms, 50))
            receiver_p95.append(common.percentile(receiver_ms, 95))
            if VERBOSE[0]:
                print(f"run {run}: with {with_p50[-1]:.1f} ms, without {without_p50[-1]:.1f} ms")
    finally:
        turn_finished.disconnect(dispatch_uid=TIMED_UID)
        from learning.apps import _count_turn

        turn_finished.connect(_count_turn, dispatch_uid=RECEIVER_UID)
    with_ms, without_ms = common.median(with_p50), common.median(without_p50)
    seen_with, seen_without = common.median(seen_with_p50), common.median(seen_without_p50)
    return [
        ["receiver per completed turn, p50", common.median(receiver_p50), "—"],
        ["receiver per completed turn, p95", common.median(receiver_p95), "—"],
        [
            f"receiver on a turn that queues a review (n={len(review_ms)})",
            common.median(review_ms) if review_ms else "—",
            "—",
        ],
        [
            "reply seen as final (turn.finished published), receiver connected, p50",
            seen_with,
            f"{seen_with / seen_without:.3f}",
        ],
        ["reply seen as final, receiver disconnected, p50", seen_without, "1"],
        ["whole turn, receiver connected, p50", with_ms, f"{with_ms / without_ms:.3f}"],
        ["whole turn, receiver disconnected, p50", without_ms, "1"],
    ]


# --- 2. a review running ------------------------------------------------------------------


def prepare_reviews(person, fake, count: int) -> tuple[Speaker, list[int]]:
    """A chat with `count` cold-start deploys (fresh contexts, no skill approved), each
    queueing one skills review (interval 8 = one deploy's tool-loop iterations)."""
    from chats.models import ChatKind
    from chats.services import chat_get_or_create
    from learning.models import Review
    from learning.services import chat_learning_update
    from tests.learning import story_tools as story
    from tests.learning.story_server import staging_server, turn_on

    speaker = Speaker(person, "bench-reviewed")
    chat, _ = chat_get_or_create(channel="telegram", chat_id=speaker.chat_id, kind=ChatKind.DM)
    chat_learning_update(chat=chat, memory_interval=0, skill_interval=8, review_notice=False)
    fake.default = story.operator_model
    with staging_server() as staging, collected_reviews() as ids:
        turn_on(staging, chat)
        for n in range(count):
            if n:
                speaker.new_context()
            app, _ = STORY[n % 4]
            speaker.turn(story.deploy_request(app, f"0.{n}.0"))
            # A real worker takes each review as it is queued; a queued one would absorb the
            # next deploy's crossing (one queued review per chat and area). Held as running
            # here, they are queued again below for the bench's own worker.
            Review.objects.filter(pk__in=ids, status=Review.Status.QUEUED).update(
                status=Review.Status.RUNNING
            )
    Review.objects.filter(pk__in=ids).update(status=Review.Status.QUEUED)
    chat_learning_update(chat=chat, memory_interval=0, skill_interval=0, review_notice=False)
    assert len(ids) == count, ids
    return speaker, ids


def review_worker(database_url: str, review_ids: list[int], pace: float) -> None:
    """The review worker's process: its own slow fake model; runs the reviews in order."""
    common.setup_django(database_url)
    from learning.review import review_run
    from tests.fakes.openai_server import FakeOpenAI
    from tests.learning.story_tools import reviewer_model

    quiet_resets()

    def slow(body):
        return replace(reviewer_model(body), tokens_per_second=pace)

    with FakeOpenAI(default=slow) as fake:
        configure_model(fake.base_url, fake.model)
        for review_id in review_ids:
            review = review_run(review_id=review_id, worker="bench-reviews")
            print(json.dumps({"id": review_id, "status": review.status}), flush=True)
    common.close_django_connections()


def reviews_running(ids: list[int]) -> bool:
    from learning.models import Review

    return Review.objects.filter(pk__in=ids, status=Review.Status.RUNNING).exists()


def review_part(database_url, person, fake, turns: int, runs: int, pace: float) -> list[list]:
    from learning.models import Review

    speaker, ids = prepare_reviews(person, fake, 2 * runs)
    fake.default = quick_model
    for _ in range(3):
        speaker.turn("What time is it?")
    quiet, busy, overlapped, durations, cpu = [], [], 0, [], []
    for run in range(runs):
        for with_review in (run % 2 == 1, run % 2 == 0):  # alternate which goes first
            if not with_review:
                samples = [speaker.timed_turn("What time is it?") for _ in range(turns)]
                quiet.append(common.percentile(samples, 50))
                continue
            mine = ids[2 * run : 2 * run + 2]
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            samples = busy_turns(database_url, speaker, mine, turns, pace)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            overlapped += len(samples)
            busy.append(common.percentile(samples, 50))
            seconds = 0.0
            for review in Review.objects.filter(pk__in=mine):
                assert review.status == Review.Status.DONE, review.error
                durations.append(review.duration_ms)
                seconds += review.duration_ms / 1000
            used = (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
            cpu.append(100 * used / seconds)
        if VERBOSE[0]:
            print(f"run {run}: quiet {quiet[-1]:.1f} ms, review running {busy[-1]:.1f} ms")
    quiet_ms, busy_ms = common.median(quiet), common.median(busy)
    return [
        ["next turn, no review running, p50", quiet_ms, "1", runs * turns],
        ["next turn, a review of the chat running, p50", busy_ms, f"{busy_ms / quiet_ms:.3f}",
         overlapped],
        ["(the review itself, duration)", common.median(durations), "—", len(durations)],
        ["(the review worker's CPU, % of one core, start-up included)", common.median(cpu), "—",
         "—"],
    ]  # fmt: skip


def busy_turns(database_url, speaker, review_ids, turns: int, pace: float) -> list[float]:
    """Turns timed while the review worker (another process) runs `review_ids`: only those
    that started and ended with a review running."""
    worker = subprocess.Popen(
        [sys.executable, __file__, "--review-worker", "--database-url", database_url,
         "--review-ids", ",".join(map(str, review_ids)), "--pace", str(pace)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not reviews_running(review_ids):
            if time.monotonic() > deadline or worker.poll() is not None:
                raise SystemExit("the review worker never started a review")
            time.sleep(0.02)
        samples = []
        for _ in range(turns):
            if not reviews_running(review_ids):
                break
            elapsed = speaker.timed_turn("What time is it?")
            if reviews_running(review_ids):
                samples.append(elapsed)
        worker.wait(timeout=120)
        return samples
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


# --- 3. review tokens in the story ---------------------------------------------------------


def tokens_part(person, fake) -> tuple[list[list], list[list]]:
    from django.contrib.auth import get_user_model
    from django.db.models import Sum

    from chats.models import ChatKind, Turn
    from chats.services import chat_get_or_create
    from learning.models import Review
    from learning.review import review_run
    from skills.models import SkillProposal
    from skills.reviews import skill_proposal_decide
    from tests.learning import story_tools as story
    from tests.learning.story_server import staging_server, turn_on

    stella = get_user_model().objects.create_user("bench-stella", is_staff=True)
    # The review part leaves its skill proposals pending (nobody approves them there); the
    # story starts from a library with none waiting, as a team would.
    SkillProposal.objects.filter(status="pending").update(status="rejected")
    speaker = Speaker(person, "bench-story")
    chat, _ = chat_get_or_create(channel="telegram", chat_id=speaker.chat_id, kind=ChatKind.DM)
    with staging_server() as staging, collected_reviews() as ids:
        turn_on(staging, chat)
        for n, (app, tag) in enumerate(STORY):
            if n:
                speaker.new_context()  # every deploy in a fresh context, as /new does
            fake.default = story.operator_model
            speaker.turn(story.deploy_request(app, tag))
            while ids:  # the review worker: at once, one at a time
                fake.default = story.reviewer_model
                review = review_run(review_id=ids.pop(0), worker="bench")
                for proposal in SkillProposal.objects.filter(review=review, status="pending"):
                    skill_proposal_decide(
                        proposal_id=proposal.pk,
                        decision="approve",
                        shown_version=proposal.base_number,
                        person=stella,
                    )
    reviews = list(Review.objects.filter(chat=speaker.chat).order_by("id"))
    rows = [
        [
            review.turn_number,
            review.focus,
            review.iterations,
            review.snapshot_tokens,
            review.prompt_tokens,
            review.completion_tokens,
            review.skill_proposals.count(),
        ]
        for review in reviews
    ]
    turns = Turn.objects.filter(chat=speaker.chat).aggregate(
        prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens")
    )
    prompt = sum(review.prompt_tokens for review in reviews)
    completion = sum(review.completion_tokens for review in reviews)
    totals = [
        ["reviews per 10 turns", len(reviews)],
        ["review prompt tokens per 10 turns", prompt],
        ["review completion tokens per 10 turns", completion],
        ["the 10 turns' own prompt tokens", turns["prompt"]],
        ["the 10 turns' own completion tokens", turns["completion"]],
        ["reviews / turns, all tokens", f"{(prompt + completion) / sum(turns.values()):.1%}"],
    ]
    return rows, totals


def clean_redis(prefix: str) -> None:
    import redis
    from django.conf import settings

    with contextlib.suppress(redis.RedisError):
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1)
        for key in client.scan_iter(f"*{prefix}*", count=1000):
            client.delete(key)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40, help="turns per timed block")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pace", type=float, default=40.0, help="review model tokens/s")
    parser.add_argument("--parts", default="counters,review,tokens")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--verbose", action="store_true", help="print each run's medians")
    parser.add_argument("--review-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--review-ids", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    VERBOSE[0] = args.verbose
    if args.review_worker:
        review_worker(args.database_url, [int(i) for i in args.review_ids.split(",")], args.pace)
        return 0
    parts = set(args.parts.split(","))
    prefix = f"hermes-bench-learning-{os.getpid()}"
    os.environ["REDIS_KEY_PREFIX"] = prefix
    counters = review = rows = totals = None
    with common.temporary_database(args.database_url, label="learning") as url:
        common.setup_django(url)
        common.migrate()
        database = common.database_description()
        from tests.fakes.openai_server import FakeOpenAI

        quiet_resets()
        try:
            with FakeOpenAI() as fake:
                configure_model(fake.base_url, fake.model)
                person = alice()
                if "counters" in parts:
                    counters = counters_part(person, fake, args.turns, args.runs)
                if "review" in parts:
                    review = review_part(url, person, fake, args.turns, args.runs, args.pace)
                if "tokens" in parts:
                    rows, totals = tokens_part(person, fake)
        finally:
            clean_redis(prefix)
            common.close_django_connections()
    print(f"Database: {database}; {args.runs} runs of {args.turns} turns per block.\n")
    if counters:
        print(common.markdown_table(["counters", "median ms", "ratio"], counters) + "\n")
    if review:
        print(common.markdown_table(["while a review runs", "median ms", "ratio", "turns"], review))
        print(f"\n(review model paced at {args.pace:g} tokens/s, in its own process)\n")
    if rows:
        headers = ["after turn", "focus", "model calls", "snapshot tokens", "prompt tokens",
                   "completion tokens", "skill proposals"]  # fmt: skip
        print(common.markdown_table(headers, rows) + "\n")
        print(common.markdown_table(["the story, 10 deploy turns", "value"], totals) + "\n")
    for key, value in common.machine_info().items():
        print(f"- {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
