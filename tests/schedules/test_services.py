"""Who may create and manage a schedule, and the limits: the owner is an active member of
the target chat; an outsider and a member of another chat are refused; a minimum interval
and a per-person count; pause, resume and run-now for the owner and chat admins only."""

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied

from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure
from schedules.models import Schedule
from schedules.services import schedule_pause, schedule_resume, schedule_run_now
from schedules.timing import ScheduleSpecError
from tests.schedules.conftest import T0

pytestmark = pytest.mark.django_db


@pytest.fixture
def other_chat(outsider):
    """A room of which `outsider` is a member, and nobody of the team room."""
    chat, _ = chat_get_or_create(channel="web", chat_id="other-room")
    chat_member_ensure(chat=chat, person=outsider, role=ChatMember.Role.OWNER)
    return chat


def test_a_member_creates_a_schedule_with_its_first_slot(make_schedule, member):
    schedule = make_schedule(person=member, cron="0 9 * * 1-5", tz="Europe/Berlin")
    assert schedule.enabled and schedule.owner == member
    # T0 is Tuesday 06:00 UTC = 08:00 in Berlin: the first slot is 09:00 Berlin, 07:00 UTC.
    assert schedule.next_fire_at == T0 + timedelta(hours=1)


def test_an_outsider_cannot_create_a_schedule_on_a_chat(make_schedule, outsider, other_chat):
    # `outsider` is a member of another chat only: neither is enough for the team room.
    with pytest.raises(PermissionDenied):
        make_schedule(person=outsider)
    assert not Schedule.objects.exists()
    # In their own chat they may.
    assert make_schedule(person=outsider, chat=other_chat).chat == other_chat


def test_an_inactive_person_cannot_own_a_schedule(make_schedule, member):
    member.is_active = False
    member.save()
    with pytest.raises(PermissionDenied):
        make_schedule(person=member)


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"cron": "0 25 * * *"}, "cron", "the hour field '25'"),
        ({"tz": "Mars/Olympus"}, "tz", "unknown time zone 'Mars/Olympus'"),
        ({"cron": "* * * * *"}, "cron", "has runs 1 minute(s) apart; the minimum interval is 5"),
        ({"kind": "interval", "interval_minutes": 2}, "every", "the minimum interval is 5"),
        ({"kind": "once", "run_at": T0 - timedelta(hours=1)}, "at", "is in the past"),
        ({"prompt": "  "}, "prompt", "the prompt is empty"),
        ({"cron": "0 0 30 2 *"}, "cron", "never fires"),
    ],
)
def test_invalid_timing_is_refused_saying_which_part(make_schedule, fields, field, says):
    with pytest.raises(ScheduleSpecError) as caught:
        make_schedule(**fields)
    assert caught.value.field == field
    assert says in str(caught.value)


# Runs 4 minutes apart only from 23:56 to 00:00: past the 60 slots that follow 01:00, so
# sampling the next slots from the creation time accepted it at 01:00 and refused it at 21:00.
CLOSE_AT_MIDNIGHT = "0,10,20,30,40,50,56 0,2,4,6,8,10,12,14,16,18,20,23 * * *"


@pytest.mark.parametrize("hour", [1, 21])
@pytest.mark.parametrize(
    ("cron", "gap"),
    [
        (CLOSE_AT_MIDNIGHT, 4),
        ("0,56 0,23 * * 1,2", 4),  # Monday 23:56, then Tuesday 00:00
        ("58 23 * * *", None),  # once a day
        ("0,56 0,23 * * 1", None),  # Monday only: 23:56, then next Monday 00:00
        ("*/5 * * * *", None),  # exactly the minimum
        ("0 9 * * 1-5", None),
    ],
)
def test_the_minimum_interval_holds_whenever_a_schedule_is_made(make_schedule, cron, gap, hour):
    """The shortest time between two runs is a property of the expression, not of the
    hour the schedule is made."""
    at = T0.replace(hour=hour)
    if gap is None:
        assert make_schedule(cron=cron, at=at).cron == cron
        return
    with pytest.raises(ScheduleSpecError) as caught:
        make_schedule(cron=cron, at=at)
    assert f"has runs {gap} minute(s) apart; the minimum interval is 5" in str(caught.value)


def test_one_person_has_at_most_the_configured_number_of_schedules(make_schedule, settings):
    settings.SCHEDULES_MAX_PER_PERSON = 2
    make_schedule()
    make_schedule(kind="interval", interval_minutes=30, cron="")
    with pytest.raises(ScheduleSpecError) as caught:
        make_schedule()
    assert "already has 2 schedules" in str(caught.value)


def test_only_the_owner_chat_admins_and_staff_manage_a_schedule(
    make_schedule, member, owner, outsider, make_person
):
    schedule = make_schedule(person=member)
    with pytest.raises(PermissionDenied):
        schedule_pause(schedule=schedule, reason="no", by=outsider)
    with pytest.raises(PermissionDenied):
        schedule_run_now(schedule=schedule, by=outsider)
    # Another plain member of the chat is refused too.
    colleague = make_person("carla")
    chat_member_ensure(chat=schedule.chat, person=colleague)
    with pytest.raises(PermissionDenied):
        schedule_pause(schedule=schedule, reason="no", by=colleague)
    # The chat's owner may pause; the schedule's owner may resume.
    assert schedule_pause(schedule=schedule, reason="holiday", by=owner)
    assert schedule.paused_reason == "holiday" and not schedule.enabled
    assert schedule_resume(schedule=schedule, by=member)
    assert schedule.enabled and schedule.paused_reason == ""


def test_a_person_sees_only_the_schedules_of_chats_they_can_read(
    make_schedule, member, outsider, other_chat
):
    from schedules.selectors import schedules_visible_to

    ours = make_schedule()
    theirs = make_schedule(person=outsider, chat=other_chat)
    assert list(schedules_visible_to(member)) == [ours]
    assert list(schedules_visible_to(outsider)) == [theirs]
    member.is_active = False
    member.save()
    assert not schedules_visible_to(member).exists()
