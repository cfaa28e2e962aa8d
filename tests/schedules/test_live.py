"""Schedules with real processes: the dispatcher task on a real Celery worker starts two
runs due in one chat one after the other (the second waits for the first's turn), the
worker runs the turns against the fake model, and the runs' receipts are written by the
worker's turn_finished hook."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from schedules.models import ScheduleRun
from schedules.tasks import dispatch as dispatch_task
from tests.fakes import openai_replies as replies

pytestmark = pytest.mark.timeout(180)


def wait_for_runs(runs, statuses, timeout=60.0) -> list[ScheduleRun]:
    """Poll the database until every run has one of `statuses` (a real worker runs them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = [ScheduleRun.objects.get(pk=run.pk) for run in runs]
        if all(run.status in statuses for run in current):
            return current
        time.sleep(0.1)
    raise AssertionError(f"runs still {[run.status for run in current]}")


def test_due_runs_start_one_after_the_other_and_are_delivered_by_a_real_worker(
    live_stack, fake_llm, make_schedule
):
    fake_llm.script(replies.text("first report"), replies.text("second report"))
    first = make_schedule(prompt="first", at=timezone.now())
    second = make_schedule(prompt="second", at=timezone.now())
    slot = timezone.now().replace(microsecond=0) - timedelta(seconds=1)
    type(first).objects.filter(pk__in=[first.pk, second.pk]).update(next_fire_at=slot)
    dispatch_task.delay()
    deadline = time.monotonic() + 60
    while ScheduleRun.objects.count() < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    runs = list(ScheduleRun.objects.order_by("schedule_id"))
    assert [run.slot_at for run in runs] == [slot, slot]
    done = wait_for_runs(runs, {"delivered", "failed"})
    assert [run.status for run in done] == ["delivered", "delivered"], [r.error for r in done]
    replies_text = sorted(run.turn.reply.text for run in done)
    assert replies_text == ["first report", "second report"]
    # One ran after the other: the second turn was requested after the first finished.
    earlier, later = sorted(done, key=lambda run: run.started_at)
    assert later.turn.created_at >= earlier.turn.finished_at
    assert later.lateness_seconds > earlier.lateness_seconds
