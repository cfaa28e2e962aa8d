"""Starting many due runs at once: a batch of runs costs a constant number of queries
(not a few per run), and each run is stored and queued exactly as one started alone."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats.agent.events import events_since
from chats.models import Chat, ChatMember, Message, Turn
from chats.services import chat_member_ensure
from schedules.dispatch import dispatch
from schedules.models import ScheduleRun
from tests.schedules.conftest import T0

pytestmark = pytest.mark.django_db

SLOT = T0 + timedelta(hours=1)


def schedules_in_rooms(make_schedule, owner, count: int, offset: int = 0, at=T0):
    """`count` schedules, each in a web room of its own that `owner` belongs to."""
    made = []
    for i in range(offset, offset + count):
        chat = Chat.objects.create(
            chat_key=f"web:room-{i}", channel="web", external_id=f"room-{i}", kind="room"
        )
        chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
        made.append(make_schedule(chat=chat, prompt=f"report {i}", at=at))
    return made


def dispatch_queries(now) -> tuple[int, object]:
    with CaptureQueriesContext(connection) as queries:
        result = dispatch(now=now)
    return len(queries), result


def test_a_pass_costs_the_same_queries_for_10_and_for_100_due_runs(make_schedule, owner, settings):
    settings.SCHEDULES_MAX_PER_PERSON = 200
    dispatch(now=T0)  # the heartbeat's row exists from now on (its first write inserts it)
    few = schedules_in_rooms(make_schedule, owner, 10)
    count_few, result = dispatch_queries(SLOT + timedelta(seconds=1))
    assert (result.claimed, result.started) == (10, 10)
    many = schedules_in_rooms(make_schedule, owner, 100, offset=10, at=SLOT)
    # The next slot of the first ten and the first of the hundred: 110 runs, one pass.
    count_many, result = dispatch_queries(SLOT + timedelta(hours=1, seconds=1))
    # The first ten are still running (their turns are queued): their runs wait.
    assert (result.claimed, result.started, result.waiting) == (110, 100, 10)
    assert count_many == count_few, (count_few, count_many)
    for schedule in many:
        run = schedule.runs.get()
        assert run.status == ScheduleRun.Status.RUNNING
        assert run.trigger.chat_id == schedule.chat_id == run.turn.chat_id
        assert run.trigger.text == schedule.prompt
        assert run.trigger.actor.display_name == "scheduled by olivia"
        assert run.turn.trigger_id == run.trigger_id and run.turn.status == Turn.Status.QUEUED
        assert run.lateness_seconds == 1
    assert Message.objects.count() == Turn.objects.count() == 110
    # One actor per schedule, reused by its later runs.
    assert len({m.actor_id for m in Message.objects.all()}) == 110
    assert all(s.runs.filter(status=ScheduleRun.Status.DUE).count() == 1 for s in few)


def test_each_started_prompt_is_announced_to_its_chats_viewers(
    make_schedule, owner, django_capture_on_commit_callbacks, monkeypatch
):
    made = schedules_in_rooms(make_schedule, owner, 3)
    monkeypatch.setattr("chats.agent.turns._enqueue_many", lambda ids: None)  # no worker
    with django_capture_on_commit_callbacks(execute=True):
        assert dispatch(now=SLOT + timedelta(seconds=1)).started == 3
    for schedule in made:
        run = schedule.runs.get()
        created = [e for e in events_since(schedule.chat_id, 0) if e["type"] == "message.created"]
        assert [e["message"]["id"] for e in created] == [run.trigger_id]
        assert created[0]["message"]["author"]["name"] == "scheduled by olivia"


def test_each_started_turn_is_sent_to_the_turn_queue_once(
    make_schedule, owner, django_capture_on_commit_callbacks, monkeypatch
):
    from chats.tasks import run_turn

    sent = []
    monkeypatch.setattr(
        run_turn, "apply_async", lambda args, producer=None, **kw: sent.append(args[0])
    )
    made = schedules_in_rooms(make_schedule, owner, 3)
    with django_capture_on_commit_callbacks(execute=True):
        assert dispatch(now=SLOT + timedelta(seconds=1)).started == 3
    assert sorted(sent) == sorted(s.runs.get().turn_id for s in made)
