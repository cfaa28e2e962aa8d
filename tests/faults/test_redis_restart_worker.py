"""Issue #11 item 8: a Redis restart while a reply streams must not end the Celery worker.

The worker runs as `make run` runs it (prefork: the turn streams in a child process, the
parent holds the broker connection and acknowledges the task when it ends)."""

import os
import time

import pytest

from chats.models import Turn
from tests.fakes import openai_server as fake_openai
from tests.faults.api import FINISHED, post_message, wait_for_turn
from tests.live import LiveStack

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def prefork_stack(transactional_db, fake_llm, owned_valkey, settings):
    from django.conf import global_settings

    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    stack = LiveStack(
        llm_base_url=fake_llm.base_url,
        worker_name=f"faults-{os.getpid()}@%h",
        extra_env={"REDIS_URL": owned_valkey.url},
    )
    log = stack.logs / f"worker-{os.getpid()}.log"
    stack.worker_log_start = log.stat().st_size if log.exists() else 0  # the log is appended
    try:
        stack.start_web()
        stack.start_worker(pool="prefork", concurrency=2)
        yield stack
    finally:
        stack.stop()


def test_the_worker_survives_a_redis_restart_while_a_reply_streams(
    prefork_stack, fake_llm, owned_valkey, api_token
):
    stack = prefork_stack
    fake_llm.script(fake_openai.text("streaming " * 80, delay=0.05))
    status, body = post_message(
        stack.url, api_token, chat_id="ops", message_id="m-1", text="a long answer please"
    )
    assert status == 201, body
    first = body["turn"]["id"]
    wait_for_turn(first, {"running"}, timeout=30)
    fake_llm.wait_for_requests(1, timeout=30)

    owned_valkey.restart(crash=True, down_seconds=1.0)

    # The turn ends (its worker process kept streaming) or the worker dies: either is seen
    # within a minute.
    deadline = time.monotonic() + 60
    while stack.worker.poll() is None and time.monotonic() < deadline:
        if Turn.objects.get(pk=first).status in FINISHED:
            break
        time.sleep(0.2)
    with open(stack.logs / f"worker-{os.getpid()}.log", "rb") as file:
        log = file.read()[stack.worker_log_start :].decode(errors="replace")
    fatal = [line for line in log.splitlines() if "Unrecoverable" in line]
    # Without the fix the worker logs this and then either exits or hangs in its shutdown,
    # consuming nothing more.
    assert not fatal, fatal
    assert stack.worker.poll() is None, f"the worker exited ({stack.worker.returncode})"
    assert Turn.objects.get(pk=first).status == "completed"

    status, body = post_message(
        stack.url, api_token, chat_id="ops", message_id="m-2", text="still there?"
    )
    assert status == 201, body
    answered = wait_for_turn(body["turn"]["id"], FINISHED, timeout=60)
    assert answered.status == "completed", answered.error
    assert stack.worker.poll() is None
