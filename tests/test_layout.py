"""`make run`'s embedded process layout keeps what separate workers were for: beat, a thread
of the turn worker, still sends the schedules' dispatcher, and the background worker runs it
while every turn thread is busy streaming a long reply; the background worker is a process
of its own, untouched when the turn worker dies."""

import os
import signal
import subprocess
import sys

import pytest

from hermes_site.embedded_valkey import free_port
from tests import database_template
from tests.fakes import openai_server as fake_openai
from tests.live import BASE_DIR, MakeRun
from tests.test_runner import _wait_answered

pytestmark = pytest.mark.heavy  # each test starts `make run` whole

SLOW = "slow"


def model_reply(body: dict) -> fake_openai.Reply:
    """A long streamed reply (about 20 s) to "slow ..." messages, a quick one otherwise."""
    text = fake_openai.last_user_text(body)
    if text.startswith(SLOW):
        return fake_openai.text("streaming " * 200, delay=0.1)
    return fake_openai.text(f"answer to: {text}")


def _post_in(base: str, token: str, chat: str, message_id: str, text: str) -> dict:
    import json
    import urllib.request

    request = urllib.request.Request(
        f"{base}/api/v1/messages",
        data=json.dumps(
            {"chat_id": chat, "user_id": "u1", "message_id": message_id, "text": text}
        ).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["turn"]


def _turn_status(base: str, token: str, turn_id: int) -> str:
    import json
    import urllib.request

    request = urllib.request.Request(
        f"{base}/api/v1/turns/{turn_id}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["turn"]["status"]


def _start(tmp_path, fake_llm, **extra_env) -> tuple[MakeRun, str, str]:
    """`make run` on the embedded layout with the fake model; (run, base URL, API token)."""
    port, valkey_port = free_port(), free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        HERMES_VAR_DIR=str(tmp_path / "var"),
        PORT=str(port),
        VALKEY_PORT=str(valkey_port),
        PYTHONPATH=str(BASE_DIR),  # this checkout's code in the Celery processes too
        HERMES_PROCESS_LAYOUT="embedded",
        CELERY_CONCURRENCY="2",
        LLM_PROVIDER="openai",
        LLM_BASE_URL=fake_llm.base_url,
        LLM_MODEL="fake-model",
        LLM_RETRY_BASE_SECONDS="0",
        **extra_env,
    )
    # Migrated already (tests/test_runner.py's first test starts on an empty var/).
    database_template.migrated_sqlite_copy(tmp_path / "var" / "hermes.sqlite3")
    run = MakeRun(env)
    try:
        login, _ = run.wait_for(r"admin login: (\S+) / (\S+)", 180)
        run.wait_for(r"worker\s*\|.* ready\.", 180)
        run.wait_for(r"background\s*\|.* ready\.", 180)
        run.wait_for(rf"Hermes Hub is up: http://127\.0\.0\.1:{port}/", 60)
        token = subprocess.run(
            [sys.executable, "manage.py", "create_api_token", login.group(1)],
            cwd=BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except BaseException:
        run.stop()
        raise
    return run, f"http://127.0.0.1:{port}", token


def test_the_dispatcher_runs_while_every_turn_thread_streams(tmp_path, fake_llm):
    fake_llm.default = model_reply
    run, base, token = _start(tmp_path, fake_llm, SCHEDULES_DISPATCH_SECONDS="1")
    try:
        assert not any(
            "started reviews" in line or "started schedules" in line for line in run.lines
        )
        # Both turn threads busy with a long reply each (two chats: one turn per chat).
        turns = [
            _post_in(base, token, chat, f"slow-{chat}", f"{SLOW} please ({chat})")["id"]
            for chat in ("a", "b")
        ]
        fake_llm.wait_for_requests(2, timeout=120)
        mark = run.mark()
        # Beat (a thread of the busy worker) sends the dispatcher; the background worker runs
        # it, while the streaming turn is still running.
        run.wait_for(r"background\s*\|.*schedules\.tasks\.dispatch\[.*\] succeeded", 60, mark)
        assert [_turn_status(base, token, turn) for turn in turns] == ["running", "running"]

        # The turn worker killed mid-reply: the background worker keeps running; the worker
        # comes back and answers.
        worker, background = run.pid("worker"), run.pid("background")
        mark = run.mark()
        os.kill(worker, signal.SIGKILL)
        run.wait_for(rf"worker \(pid {worker}\) exited with signal 9", 30, mark)
        run.wait_for(r"worker\s*\|.* ready\.", 180, mark)
        assert run.pid("background") == background
        mark = run.mark()
        run.wait_for(r"background\s*\|.*schedules\.tasks\.dispatch\[.*\] succeeded", 60, mark)
        answered = _wait_answered(
            base, token, _post_in(base, token, "c", "after", "are you back?")["id"]
        )
        assert answered["status"] == "completed"
    finally:
        leftovers = run.stop()
    assert leftovers == [], f"processes left running after Ctrl-C: {leftovers}"


def test_a_review_waiting_on_the_model_does_not_delay_a_turn(tmp_path, fake_llm):
    """A review (on the background worker) holds its model call; a person's turn posted
    meanwhile is answered by the turn worker while that review still waits."""
    import threading

    review_started, release_review = threading.Event(), threading.Event()

    def reply(body: dict) -> fake_openai.Reply:
        system = " ".join(
            str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "system"
        )
        if "background reviewer" in system:
            review_started.set()
            release_review.wait(timeout=240)
            return fake_openai.text("Nothing worth keeping.")
        return fake_openai.text(f"answer to: {fake_openai.last_user_text(body)}")

    fake_llm.default = reply
    # A memory review after every completed turn, none for skills.
    run, base, token = _start(
        tmp_path, fake_llm, LEARNING_MEMORY_REVIEW_INTERVAL="1", LEARNING_SKILL_REVIEW_INTERVAL="0"
    )
    try:
        first = _wait_answered(base, token, _post_in(base, token, "a", "m1", "hello")["id"])
        assert first["status"] == "completed"
        assert review_started.wait(timeout=120), "the completed turn started a review"
        # The review waits on the model; a turn in another chat is answered meanwhile.
        answered = _wait_answered(base, token, _post_in(base, token, "b", "m2", "quick?")["id"])
        assert answered["status"] == "completed"
        assert not release_review.is_set()
        assert not any(
            "learning.tasks.run_review" in line and "succeeded" in line for line in run.lines
        ), "the review was still waiting"
    finally:
        release_review.set()
        leftovers = run.stop()
    assert leftovers == [], f"processes left running after Ctrl-C: {leftovers}"
