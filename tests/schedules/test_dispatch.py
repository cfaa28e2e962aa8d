"""The dispatcher: a due slot is recorded and started once, as a message of the schedule's
own actor and a turn on the normal path; catch-up after downtime (`skip`, `once`); a busy
chat makes the run wait without interrupting anyone; an owner who lost access pauses the
schedule; the heartbeat says when nothing dispatches."""

from datetime import timedelta

import pytest

from chats.agent.interrupts import interrupt_reason
from chats.agent.turns import turn_claim, turn_request
from chats.models import ChatMember, Message, Turn
from chats.services import message_ingest
from schedules.dispatch import dispatch
from schedules.models import ScheduleRun
from schedules.selectors import scheduler_status
from tests.schedules.conftest import T0

pytestmark = pytest.mark.django_db

SLOT = T0 + timedelta(hours=1)  # the first slot of the default hourly schedule


def runs(schedule):
    return list(schedule.runs.order_by("slot_at").values_list("slot_at", "status"))


def test_a_due_slot_is_stored_as_the_schedules_message_and_starts_a_turn(make_schedule):
    schedule = make_schedule()
    assert dispatch(now=SLOT - timedelta(seconds=1)).claimed == 0
    result = dispatch(now=SLOT + timedelta(seconds=2))
    assert (result.claimed, result.started) == (1, 1)
    run = schedule.runs.get()
    assert run.status == ScheduleRun.Status.RUNNING and run.lateness_seconds == 2
    trigger = run.trigger
    assert trigger.chat == schedule.chat and trigger.text == "Post the open incidents"
    assert trigger.role == Message.Role.USER
    assert trigger.actor.display_name == "scheduled by olivia"
    assert trigger.actor.namespace == "schedule" and trigger.actor.person is None
    assert run.turn.trigger == trigger and run.turn.status == Turn.Status.QUEUED
    schedule.refresh_from_db()
    assert schedule.next_fire_at == SLOT + timedelta(hours=1)
    # Beat again within the same slot: nothing new.
    assert dispatch(now=SLOT + timedelta(seconds=7)).claimed == 0
    assert Turn.objects.count() == 1


@pytest.mark.storage
def test_a_dispatcher_restarted_on_the_slot_boundary_runs_the_slot_once(make_schedule, monkeypatch):
    schedule = make_schedule()
    # The first pass records the slot, then dies before it advances the schedule or starts
    # the run (beat killed on the slot boundary).
    from schedules import dispatch as dispatch_module

    def die(*args, **kwargs):
        raise SystemExit("beat stopped")

    with monkeypatch.context() as patch:
        patch.setattr(dispatch_module, "update_rows", die)  # advancing next_fire_at
        with pytest.raises(SystemExit):
            dispatch(now=SLOT)
    assert runs(schedule) == [(SLOT, ScheduleRun.Status.DUE)]
    # The restarted beat sees the same slot again (next_fire_at was not advanced), twice.
    dispatch(now=SLOT + timedelta(seconds=1))
    dispatch(now=SLOT + timedelta(seconds=1))
    assert runs(schedule) == [(SLOT, ScheduleRun.Status.RUNNING)]
    assert Turn.objects.count() == 1 and Message.objects.filter(chat=schedule.chat).count() == 1


@pytest.mark.storage
def test_catch_up_skip_records_each_missed_slot_then_runs_the_next(make_schedule):
    schedule = make_schedule(catch_up="skip")
    # The hub was down from before 07:00 until 09:30: the 07, 08 and 09 o'clock slots passed.
    result = dispatch(now=SLOT + timedelta(hours=2, minutes=30))
    assert (result.claimed, result.missed, result.started) == (3, 3, 0)
    missed = schedule.runs.all()
    assert {run.status for run in missed} == {ScheduleRun.Status.MISSED}
    assert all("not running" in run.reason for run in missed)
    assert not Turn.objects.exists()
    dispatch(now=SLOT + timedelta(hours=3, seconds=1))
    assert runs(schedule)[-1] == (SLOT + timedelta(hours=3), ScheduleRun.Status.RUNNING)
    assert Turn.objects.count() == 1


@pytest.mark.storage
def test_catch_up_once_runs_exactly_once_for_all_missed_slots(make_schedule):
    schedule = make_schedule(catch_up="once")
    dispatch(now=SLOT + timedelta(hours=2, minutes=30))
    assert runs(schedule) == [
        (SLOT, ScheduleRun.Status.MISSED),
        (SLOT + timedelta(hours=1), ScheduleRun.Status.MISSED),
        (SLOT + timedelta(hours=2), ScheduleRun.Status.RUNNING),
    ]
    catch_up = schedule.runs.get(status=ScheduleRun.Status.RUNNING)
    assert catch_up.reason == "catch-up run for 3 missed slot(s)"
    assert Turn.objects.count() == 1
    # Later passes add nothing until the next slot.
    dispatch(now=SLOT + timedelta(hours=2, minutes=31))
    assert schedule.runs.count() == 3 and Turn.objects.count() == 1


def test_a_run_waits_for_a_persons_turn_and_never_interrupts_it(make_schedule, member):
    schedule = make_schedule()
    said = message_ingest(
        channel="web", chat_id="team-room", user_id=str(member.pk), text="a long question"
    ).message
    persons = turn_request(message=said, enqueue=False)
    turn_claim(turn_id=persons.pk, worker="w")
    result = dispatch(now=SLOT + timedelta(seconds=1))
    assert (result.claimed, result.started, result.waiting) == (1, 0, 1)
    persons.refresh_from_db()
    assert persons.status == Turn.Status.RUNNING and interrupt_reason(persons.pk) is None
    run = schedule.runs.get()
    assert run.status == ScheduleRun.Status.DUE and run.trigger is None
    assert Message.objects.filter(chat=schedule.chat).count() == 1  # the prompt is not stored
    # The person's turn ends; the next pass starts the run and says how late it was.
    Turn.objects.filter(pk=persons.pk).update(status=Turn.Status.COMPLETED)
    dispatch(now=SLOT + timedelta(minutes=10))
    run.refresh_from_db()
    assert run.status == ScheduleRun.Status.RUNNING and run.lateness_seconds == 600


def test_a_run_starts_as_soon_as_the_persons_turn_finishes(make_schedule, member):
    from chats.agent.turns import turn_announce_finished

    schedule = make_schedule()
    said = message_ingest(
        channel="web", chat_id="team-room", user_id=str(member.pk), text="question"
    ).message
    persons = turn_request(message=said, enqueue=False)
    dispatch(now=SLOT + timedelta(seconds=1))  # the chat has a queued turn: the run waits
    assert schedule.runs.get().status == ScheduleRun.Status.DUE
    Turn.objects.filter(pk=persons.pk).update(status=Turn.Status.COMPLETED)
    persons.refresh_from_db()
    turn_announce_finished(persons, Turn.Status.COMPLETED)  # what the worker does
    run = schedule.runs.get()
    assert run.status == ScheduleRun.Status.RUNNING and run.lateness_seconds > 0


def test_an_owner_who_can_no_longer_read_the_chat_has_the_schedule_paused(make_schedule, member):
    weekly = make_schedule(person=member, cron="0 9 * * 1")
    ChatMember.objects.filter(chat=weekly.chat, person=member).delete()
    # The next pass pauses it, days before its next slot.
    assert dispatch(now=T0 + timedelta(seconds=5)).paused == 1
    weekly.refresh_from_db()
    assert not weekly.enabled
    assert weekly.paused_reason == "its owner can no longer read this chat"
    assert not weekly.runs.exists() and not Message.objects.exists()
    # Paused: later slots are not claimed.
    assert dispatch(now=T0 + timedelta(days=8)).claimed == 0


def test_a_run_whose_owner_lost_access_while_it_waited_is_skipped(make_schedule, member):
    schedule = make_schedule(person=member)
    said = message_ingest(
        channel="web", chat_id="team-room", user_id=str(member.pk), text="question"
    ).message
    persons = turn_request(message=said, enqueue=False)
    dispatch(now=SLOT + timedelta(seconds=1))  # busy: the run waits
    ChatMember.objects.filter(chat=schedule.chat, person=member).delete()
    Turn.objects.filter(pk=persons.pk).update(status=Turn.Status.COMPLETED)
    from schedules.dispatch import start_due_runs

    start_due_runs(SLOT + timedelta(minutes=1))  # as if it started before the pause
    run = schedule.runs.get()
    assert run.status == ScheduleRun.Status.SKIPPED
    assert run.reason == "schedule paused: its owner can no longer read this chat"
    assert not Turn.objects.exclude(pk=persons.pk).exists()


def test_a_run_of_a_schedule_paused_while_it_waited_is_skipped(make_schedule, member):
    from schedules.services import schedule_pause

    schedule = make_schedule()
    said = message_ingest(
        channel="web", chat_id="team-room", user_id=str(member.pk), text="question"
    ).message
    persons = turn_request(message=said, enqueue=False)
    dispatch(now=SLOT + timedelta(seconds=1))
    schedule_pause(schedule=schedule, reason="not today")
    Turn.objects.filter(pk=persons.pk).update(status=Turn.Status.COMPLETED)
    dispatch(now=SLOT + timedelta(minutes=1))
    run = schedule.runs.get()
    assert (run.status, run.reason) == (ScheduleRun.Status.SKIPPED, "the schedule is paused")


def test_a_run_that_cannot_start_fails_without_blocking_the_others(make_schedule, monkeypatch):
    from chats.services import IngestError
    from schedules.services import runs

    broken, fine = make_schedule(prompt="first"), make_schedule(prompt="second")
    validate = runs.validate_text

    def refuse_the_first(text, *args):
        if text == "first":
            raise IngestError("text", "refused for the test")
        return validate(text, *args)

    # The batch with both runs fails; started one by one, the first fails, the second runs.
    monkeypatch.setattr(runs, "validate_text", refuse_the_first)
    result = dispatch(now=SLOT + timedelta(seconds=1))
    assert result.started == 1
    failed = broken.runs.get()
    assert failed.status == ScheduleRun.Status.FAILED
    assert failed.error == "could not start: refused for the test"
    assert fine.runs.get().status == ScheduleRun.Status.RUNNING
    broken.refresh_from_db()
    assert broken.consecutive_failures == 1


def test_the_heartbeat_says_plainly_when_nothing_dispatches():
    status = scheduler_status(now=T0)
    assert not status.alive and "no scheduler has ever run" in status.message
    dispatch(now=T0)
    assert scheduler_status(now=T0 + timedelta(seconds=10)).alive
    stopped = scheduler_status(now=T0 + timedelta(minutes=4, seconds=5))
    assert not stopped.alive
    assert stopped.message == (
        "no scheduler has run for 4 minutes: schedules will not fire until beat and the "
        "schedules worker are back"
    )


def test_beat_runs_the_dispatcher_every_few_seconds(settings):
    from hermes_site.celery import app, minute_tasks, periodic_tasks
    from schedules.tasks import dispatch as dispatch_task

    settings.SCHEDULES_DISPATCH_SECONDS = 3
    assert ("dispatch-schedules", "schedules.tasks.dispatch", 3) in periodic_tasks()
    # And at second 0 of every minute, where every cron slot is.
    assert ("dispatch-schedules-on-the-minute", "schedules.tasks.dispatch") in minute_tasks()
    # Beat sends it to the dispatcher's own queue, which no turn worker takes.
    route = app.amqp.router.route({}, "schedules.tasks.dispatch")
    assert route["queue"].name == f"{settings.REDIS_KEY_PREFIX}-schedules"
    assert app.amqp.router.route({}, "chats.tasks.run_turn")["queue"].name == (
        settings.REDIS_KEY_PREFIX
    )
    assert dispatch_task() == {
        "claimed": 0,
        "missed": 0,
        "started": 0,
        "waiting": 0,
        "settled": 0,
        "paused": 0,
    }
    assert scheduler_status().alive
