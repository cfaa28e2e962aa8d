"""Changing and deleting a schedule: the same people as for pausing (its owner, the chat's
owners and admins, staff), only the owner changes the words posted in their name, a change
of timing is checked like a new schedule and moves the next slot."""

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from freezegun import freeze_time

from chats.services import chat_member_ensure
from schedules.models import Schedule, ScheduleRun
from schedules.services import schedule_delete, schedule_run_now, schedule_update
from schedules.timing import ScheduleSpecError
from tests.schedules.conftest import T0

pytestmark = pytest.mark.django_db


def test_the_owner_changes_the_timing_and_the_next_slot_follows(make_schedule, member):
    schedule = make_schedule(person=member, cron="0 9 * * 1-5", tz="UTC")
    assert schedule.next_fire_at == T0 + timedelta(hours=3)
    with freeze_time(T0):
        schedule_update(schedule=schedule, by=member, cron="30 7 * * *", tz="Europe/Berlin")
    # 07:30 in Berlin is 05:30 UTC: today's has passed (T0 is 06:00 UTC), so tomorrow's.
    assert (schedule.cron, schedule.timezone) == ("30 7 * * *", "Europe/Berlin")
    assert schedule.next_fire_at == T0 + timedelta(days=1) - timedelta(minutes=30)


def test_a_change_of_kind_clears_the_fields_of_the_old_kind(make_schedule, member):
    schedule = make_schedule(person=member)
    with freeze_time(T0):
        schedule_update(schedule=schedule, by=member, kind="interval", interval_minutes=45)
    assert (schedule.kind, schedule.cron, schedule.interval_minutes) == ("interval", "", 45)
    assert schedule.anchor_at == T0 and schedule.next_fire_at == T0 + timedelta(minutes=45)
    with freeze_time(T0):
        schedule_update(schedule=schedule, by=member, kind="once", run_at=T0 + timedelta(days=2))
    assert (schedule.interval_minutes, schedule.run_at) == (None, T0 + timedelta(days=2))
    assert schedule.next_fire_at == T0 + timedelta(days=2)


def test_changing_only_the_prompt_or_mode_keeps_the_slots(make_schedule, member):
    schedule = make_schedule(person=member, kind="interval", interval_minutes=30, cron="")
    anchor, slot = schedule.anchor_at, schedule.next_fire_at
    with freeze_time(T0 + timedelta(minutes=10)):
        schedule_update(
            schedule=schedule, by=member, prompt="  New words ", mode="isolated", catch_up="once"
        )
    assert (schedule.prompt, schedule.mode, schedule.catch_up) == ("New words", "isolated", "once")
    assert (schedule.anchor_at, schedule.next_fire_at) == (anchor, slot)


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"cron": "0 9 * * 8"}, "cron", "the day of week field '8'"),
        ({"cron": "0 9 *"}, "cron", "has 3 field(s); it needs 5"),
        ({"tz": "Europe/Berlinn"}, "tz", "did you mean Europe/Berlin"),
        ({"kind": "interval", "interval_minutes": 1}, "every", "the minimum interval is 5"),
        ({"kind": "once", "run_at": T0 - timedelta(minutes=1)}, "at", "is in the past"),
        ({"prompt": ""}, "prompt", "the prompt is empty"),
        ({"mode": "loud"}, "mode", "mode must be chat or isolated"),
    ],
)
def test_an_invalid_change_is_refused_naming_the_part_and_nothing_changes(
    make_schedule, member, fields, field, says
):
    schedule = make_schedule(person=member)
    before = Schedule.objects.filter(pk=schedule.pk).values().get()
    with freeze_time(T0), pytest.raises(ScheduleSpecError) as caught:
        schedule_update(schedule=schedule, by=member, **fields)
    assert caught.value.field == field and says in str(caught.value)
    assert Schedule.objects.filter(pk=schedule.pk).values().get() == before


def test_who_may_change_and_delete(make_schedule, member, owner, outsider, make_person):
    schedule = make_schedule(person=member)
    colleague = make_person("carla")
    chat_member_ensure(chat=schedule.chat, person=colleague)
    for stranger in (outsider, colleague):  # an outsider, another plain member
        with pytest.raises(PermissionDenied):
            schedule_update(schedule=schedule, by=stranger, cron="0 10 * * *")
        with pytest.raises(PermissionDenied):
            schedule_delete(schedule=schedule, by=stranger)
    assert Schedule.objects.get(pk=schedule.pk).cron == "0 * * * *"
    # The chat's owner changes when it runs, but not the words posted in the member's name.
    with freeze_time(T0):
        schedule_update(schedule=schedule, by=owner, cron="0 10 * * *")
    assert schedule.cron == "0 10 * * *"
    with pytest.raises(PermissionDenied, match="Only its owner changes what a schedule asks"):
        schedule_update(schedule=schedule, by=owner, prompt="Something else")
    # Sending the same words back (a form that changed only the time) is no change.
    schedule_update(schedule=schedule, by=owner, prompt=schedule.prompt)
    staff = make_person("sam", is_staff=True)
    with freeze_time(T0):
        schedule_update(schedule=schedule, by=staff, cron="0 11 * * *")
    assert Schedule.objects.get(pk=schedule.pk).cron == "0 11 * * *"
    inactive_owner = schedule.owner
    inactive_owner.is_active = False
    inactive_owner.save()
    with pytest.raises(PermissionDenied):
        schedule_delete(schedule=schedule, by=inactive_owner)
    schedule_delete(schedule=schedule, by=owner)
    assert not Schedule.objects.filter(pk=schedule.pk).exists()


def test_deleting_a_schedule_deletes_its_run_records(make_schedule, member):
    schedule = make_schedule(person=member)
    ScheduleRun.objects.create(schedule=schedule, slot_at=T0, status=ScheduleRun.Status.MISSED)
    schedule_delete(schedule=schedule, by=member)
    assert not ScheduleRun.objects.exists()


def test_one_run_now_of_a_schedule_at_a_time(make_schedule, member):
    schedule = make_schedule(person=member)
    first = schedule_run_now(schedule=schedule, by=member)
    assert first.status == ScheduleRun.Status.RUNNING
    with pytest.raises(ScheduleSpecError) as caught:
        schedule_run_now(schedule=schedule, by=member)
    assert caught.value.field == "run" and f"run {first.pk} of this schedule" in str(caught.value)
    # Once it has finished, another may be asked for.
    ScheduleRun.objects.filter(pk=first.pk).update(status=ScheduleRun.Status.DELIVERED)
    assert schedule_run_now(schedule=schedule, by=member).pk != first.pk
