"""`make run` under fault injection: the real supervisor (hermes_site.runner) with daphne and
a Celery worker (prefork, beat inside) on the test database, a Valkey the test owns and can
kill, and the fake model; plus what the suite measures."""

import os
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from chats.models import Message, Turn
from hermes_site.embedded_valkey import ValkeyServer, free_port
from tests.fakes import openai_server as fake_openai
from tests.faults.api import post_message
from tests.live import BASE_DIR, MakeRun, database_url_for_subprocesses

SLOW = "slow"  # a message starting with this gets a long streamed reply
PASSWORD = "a-long-fault-password-1"  # the `person` fixture's, for logging in to the stack
SLOW_REPLY_WORDS = 200
SLOW_DELAY_SECONDS = 0.05  # 200 words: about 10 s of streaming
FIGURES_FILE = BASE_DIR / "var" / "test-logs" / "fault-figures.jsonl"


def model_reply(body: dict) -> fake_openai.Reply:
    """The fake model: a slow streamed reply to "slow ..." messages, a quick one otherwise."""
    text = fake_openai.last_user_text(body)
    if text.startswith(SLOW):
        return fake_openai.text("streaming " * SLOW_REPLY_WORDS, delay=SLOW_DELAY_SECONDS)
    return fake_openai.text(f"answer to: {text}")


@dataclass
class SupervisedStack:
    run: MakeRun
    url: str
    valkey: ValkeyServer
    token: str
    posted: list[tuple[str, str, str]] = field(default_factory=list)  # chat, message id, text

    def post(self, chat_id: str, message_id: str, text: str):
        self.posted.append((chat_id, message_id, text))
        return post_message(self.url, self.token, chat_id=chat_id, message_id=message_id, text=text)

    def wait_worker_ready(self, since: int, timeout: float = 120) -> None:
        self.run.wait_for(r"worker\s*\| .*ready\.", timeout, since)

    def assert_all_running(self) -> None:
        """No process stays dead: the last started web and worker are alive."""
        for name in ("web", "worker"):
            pid = self.run.pid(name)
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            assert state != "Z", f"{name} (pid {pid}) is dead"

    def requeued(self) -> int:
        """How many queued turns the sweep enqueued again (their task was lost)."""
        found = (re.search(r"enqueued (\d+) queued turn", line) for line in self.run.lines)
        return sum(int(match.group(1)) for match in found if match)

    def exits(self, name: str) -> list[str]:
        """The supervisor's lines saying that `name` exited."""
        return [line for line in self.run.lines if f"| {name} (pid" in line and "exited" in line]


def start_supervised_stack(*, tmp_path: Path, fake_llm, valkey: ValkeyServer, token: str, **env):
    """`make run` with REDIS_URL pointing at the test's Valkey (so the supervisor runs web and
    worker, and the test restarts Redis), on the test database."""
    port = free_port()
    run = MakeRun(
        {
            **os.environ,
            "DATABASE_URL": database_url_for_subprocesses(),
            "REDIS_URL": valkey.url,
            "REDIS_KEY_PREFIX": settings.REDIS_KEY_PREFIX,
            "SECRET_KEY": settings.SECRET_KEY,
            "HERMES_VAR_DIR": str(tmp_path / "var"),
            "PORT": str(port),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "INFO",
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": fake_llm.base_url,
            "LLM_MODEL": "fake-model",
            "LLM_RETRY_BASE_SECONDS": "0",
            "LLM_TIMEOUT_SECONDS": "10",
            "LLM_CONTEXT_TOKENS": str(settings.LLM_CONTEXT_TOKENS),
            **env,
        }
    )
    try:
        run.wait_for(r"worker\s*\| .*ready\.", 180)
        run.wait_for(rf"Hermes Hub is up: http://127\.0\.0\.1:{port}/", 120)
    except BaseException:
        run.stop()
        raise
    return SupervisedStack(run=run, url=f"http://127.0.0.1:{port}", valkey=valkey, token=token)


def wait_answered(turn_id: int, timeout: float = 60.0) -> tuple[Turn, float]:
    """The turn once completed and the monotonic time it was seen so; AssertionError if it
    ends otherwise or is not answered within `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        turn = Turn.objects.get(pk=turn_id)
        if turn.status == Turn.Status.COMPLETED:
            return turn, time.monotonic()
        if turn.status in (Turn.Status.FAILED, Turn.Status.INTERRUPTED):
            raise AssertionError(f"turn {turn_id} ended {turn.status}: {turn.error}")
        if time.monotonic() > deadline:
            raise AssertionError(f"turn {turn_id} not answered within {timeout:.0f} s")
        time.sleep(0.1)


def assert_kept_and_run_once(stack: SupervisedStack, fake_llm) -> dict:
    """Every posted message is stored once, as posted; no trigger got a second model request,
    a second turn or a second reply. Returns the counts."""
    asked = [fake_openai.last_user_text(body) for body in fake_llm.requests]
    counts = {"messages": 0, "turns": 0, "replies": 0, "model_requests": 0}
    for _chat_id, message_id, text in stack.posted:
        # Message ids are unique across the suite; API chats' external ids are namespaced.
        stored = Message.objects.filter(external_id=message_id, role=Message.Role.USER)
        assert [m.text for m in stored] == [text], f"message {message_id} not kept as posted"
        trigger = stored.get()
        turns = list(Turn.objects.filter(trigger=trigger))
        replies = Message.objects.filter(reply_to=trigger, role=Message.Role.ASSISTANT).count()
        # In shared chats the prompt prefixes the author's name: "[name] text".
        requests = sum(1 for t in asked if t == text or t.endswith(f"] {text}"))
        assert len(turns) == 1, f"{message_id}: {len(turns)} turns"
        assert replies <= 1, f"{message_id}: {replies} replies"
        if turns[0].status == Turn.Status.COMPLETED:
            assert requests == 1, f"{message_id} was sent to the model {requests} times"
        assert requests <= 1, f"{message_id} was sent to the model {requests} times"
        counts["messages"] += 1
        counts["turns"] += len(turns)
        counts["replies"] += replies
        counts["model_requests"] += requests
    return counts


def record_figures(name: str, answer_seconds: list[float], **extra) -> dict:
    """Append one run's figures to var/test-logs/fault-figures.jsonl (docs/RELIABILITY.md)."""
    import json

    figures = {
        "scenario": name,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "database": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
        "runs": len(answer_seconds),
        "answer_after_recovery_median_s": round(statistics.median(answer_seconds), 2),
        "answer_after_recovery_max_s": round(max(answer_seconds), 2),
        **extra,
    }
    FIGURES_FILE.parent.mkdir(parents=True, exist_ok=True)
    with FIGURES_FILE.open("a") as file:
        file.write(json.dumps(figures) + "\n")
    print(figures)
    return figures


def wait_streaming(fake_llm, text: str) -> None:
    """Until the model has been asked to answer `text` (its reply is streaming from then)."""
    fake_llm.wait_until(
        lambda fake: any(fake_openai.last_user_text(b) == text for b in fake.requests), 30
    )
