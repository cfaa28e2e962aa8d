"""Schedules with real processes: the dispatcher task on its own queue and worker (as `make
run` starts them) starts two runs due in one chat one after the other (the second waits for
the first's turn), the turn worker runs the turns against the fake model, and the runs'
receipts are written by the worker's turn_finished hook; a turn worker kept busy by a long
turn does not delay the dispatcher."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from chats.agent.turns import turn_request
from chats.models import Chat, ChatMember, Turn
from chats.services import chat_member_ensure, message_ingest
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
    live_stack.start_dispatcher()
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


def wait_for(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def test_the_dispatcher_starts_runs_while_every_turn_worker_is_busy(
    live_stack, fake_llm, make_schedule, owner
):
    live_stack.start_dispatcher()
    # The one turn worker (solo pool) is busy with a person's turn in another chat: the
    # model answers nothing for longer than the test lasts.
    fake_llm.script(replies.hang(120))
    other, _ = Chat.objects.get_or_create(
        chat_key="web:other-room", channel="web", external_id="other-room", kind="room"
    )
    chat_member_ensure(chat=other, person=owner, role=ChatMember.Role.OWNER)
    said = message_ingest(channel="web", chat_id="other-room", user_id=str(owner.pk), text="hi")
    persons = turn_request(message=said.message)
    wait_for(
        lambda: Turn.objects.get(pk=persons.pk).status == Turn.Status.RUNNING, "the person's turn"
    )
    schedule = make_schedule(prompt="report", at=timezone.now())
    slot = timezone.now().replace(microsecond=0) - timedelta(seconds=1)
    type(schedule).objects.filter(pk=schedule.pk).update(next_fire_at=slot)
    dispatch_task.delay()
    wait_for(lambda: schedule.runs.filter(status="running").exists(), "the scheduled run")
    # Started (its prompt stored, its turn queued) while the turn worker was still busy.
    assert Turn.objects.get(pk=persons.pk).status == Turn.Status.RUNNING
    run = schedule.runs.get()
    assert run.turn.status == Turn.Status.QUEUED and run.trigger.text == "report"
