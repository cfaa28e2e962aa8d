"""Fault injection (tests/faults/conftest.py says what every scenario checks): Redis
restarted mid-reply, 5 times; nothing has to be restarted."""

import time

import pytest

from chats.models import Turn
from tests.faults.api import wait_for_turn
from tests.faults.stack import (
    SLOW,
    assert_kept_and_run_once,
    record_figures,
    wait_answered,
    wait_streaming,
)

pytestmark = [pytest.mark.timeout(900), pytest.mark.heavy]

REDIS_RESTARTS = 5


def test_redis_restarted_mid_reply_5_times(stack, fake_llm):
    after_recovery = []
    for i in range(REDIS_RESTARTS):
        chat = f"redis-{i}"
        slow = f"{SLOW} reply please, restart {i}"
        status, body = stack.post(chat, f"redis-{i}-slow", slow)
        assert status == 201, body
        streaming_turn = body["turn"]["id"]
        wait_for_turn(streaming_turn, {"running"}, timeout=60)
        wait_streaming(fake_llm, slow)

        stack.valkey.restart(crash=True, down_seconds=1.0)  # SIGKILL, 1 s down, same data
        back_at = time.monotonic()
        status, body = stack.post(chat, f"redis-{i}-after", f"still there, restart {i}?")
        assert status == 201, body
        _, answered_at = wait_answered(body["turn"]["id"], timeout=60)
        after_recovery.append(answered_at - back_at)
        streamed = Turn.objects.get(pk=streaming_turn)
        # It finished, or the newer message interrupted it (the chat's busy mode): never both
        # still running, never run again.
        assert streamed.status in (Turn.Status.COMPLETED, Turn.Status.INTERRUPTED)

    counts = assert_kept_and_run_once(stack, fake_llm)
    stack.assert_all_running()
    # Nothing had to be restarted: the worker and daphne ride through a Redis restart.
    assert stack.exits("worker") == [] and stack.exits("web") == []
    assert not [line for line in stack.run.lines if "Unrecoverable" in line]
    record_figures(
        "Redis restart mid-reply", after_recovery, requeued_by_sweep=stack.requeued(), **counts
    )
