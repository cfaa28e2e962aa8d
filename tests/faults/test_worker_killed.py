"""Fault injection (tests/faults/conftest.py says what every scenario checks): the turn
worker SIGKILLed mid-reply, 20 times, in four chats in turn."""

import os
import signal
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

WORKER_KILLS = 20


# A message posted in the instant the worker dies can be handed by Redis to the dying
# process (kombu pops with BRPOP and records a message as unacknowledged only once it has
# read it): its turn stays queued until the sweep enqueues it again. At the defaults that is
# 30-45 s (measured, docs/RELIABILITY.md); a quicker sweep here keeps the 20 kills short.
FAST_SWEEP = {"TURN_SWEEP_SECONDS": "2", "TURN_REQUEUE_AFTER_SECONDS": "5"}


@pytest.mark.parametrize("stack", [FAST_SWEEP], indirect=True, ids=["fast-sweep"])
def test_the_worker_killed_mid_reply_20_times(stack, fake_llm):
    after_ready, after_kill = [], []
    started = time.monotonic()
    for i in range(WORKER_KILLS):
        chat = f"kill-{i % 4}"
        slow = f"{SLOW} reply please, round {i}"
        status, body = stack.post(chat, f"kill-{i}-slow", slow)
        assert status == 201, body
        killed_turn = body["turn"]["id"]
        wait_for_turn(killed_turn, {"running"}, timeout=60)
        wait_streaming(fake_llm, slow)

        worker = stack.run.pid("worker")
        mark = stack.run.mark()
        killed_at = time.monotonic()
        os.kill(worker, signal.SIGKILL)  # the worker's main process, mid-reply
        # Posted while no worker runs: queued in Redis, answered once the worker is back.
        status, body = stack.post(chat, f"kill-{i}-after", f"are you back, round {i}?")
        assert status == 201, body

        stack.run.wait_for(rf"worker \(pid {worker}\) exited with signal 9", 30, mark)
        stack.wait_worker_ready(mark)
        ready_at = time.monotonic()
        _, answered_at = wait_answered(body["turn"]["id"], timeout=60)
        after_ready.append(answered_at - ready_at)
        after_kill.append(answered_at - killed_at)
        # The killed turn is over and is not run again.
        assert Turn.objects.get(pk=killed_turn).status == Turn.Status.INTERRUPTED

    counts = assert_kept_and_run_once(stack, fake_llm)
    stack.assert_all_running()
    assert len(stack.exits("worker")) == WORKER_KILLS
    assert stack.exits("web") == []
    record_figures(
        "worker SIGKILL mid-reply",
        after_ready,
        kill_to_answer_median_s=round(sorted(after_kill)[len(after_kill) // 2], 2),
        kill_to_answer_max_s=round(max(after_kill), 2),
        sweep=FAST_SWEEP,
        worker_restarts=len(stack.exits("worker")),
        scenario_seconds=round(time.monotonic() - started),
        requeued_by_sweep=stack.requeued(),
        **counts,
    )
