"""`/schedules` on Telegram, through the bridge's update processing (the group's
administrators read from the fake Bot API server): members of the chat see its schedules;
people who are not members (linked elsewhere, or unlinked) see nothing; a member who is not
the owner or an admin cannot pause or run a schedule; the owner and an admin can; a schedule
of another chat is not found; with no scheduler heartbeat the answer says schedules will not
fire."""

from datetime import timedelta

import pytest
from django.utils import timezone

from chats.models import ChatKind, ChatMember, Turn
from chats.services import actor_get_or_create, chat_get_or_create, chat_member_ensure
from operations.services import heartbeat_beat
from schedules.models import ScheduleRun
from schedules.selectors import DISPATCHER_HEARTBEAT
from tests.bots.conftest import BOT
from tests.fakes.telegram_server import FakeTelegram, check_html, group_chat, tg_user

pytestmark = pytest.mark.django_db

GROUP_ID = -1001000000001
OWNER = tg_user(1001, "Olga")
MEMBER = tg_user(1002, "Mo")
ADMIN = tg_user(1003, "Ada")
OUTSIDER = tg_user(1004, "Otto")
STRANGER = tg_user(1005, "Stan")  # in the Telegram group, no dashboard login
WILL_NOT_FIRE = "schedules will not fire"


@pytest.fixture
def fake_telegram(settings):
    with FakeTelegram() as tg:
        tg.configure(settings)
        settings.TELEGRAM_ALLOWED_CHATS = [str(GROUP_ID)]
        tg.set_administrators(GROUP_ID, [])
        yield tg


@pytest.fixture
def group(owner, member, outsider, make_person):
    """The Telegram group's chat: owner and member are members, Ada its admin; the outsider
    is linked but not a member; each linked to their Telegram user."""
    chat, _ = chat_get_or_create(
        channel="telegram", chat_id=str(GROUP_ID), kind=ChatKind.GROUP, title="ops"
    )
    admin = make_person("ada")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.MEMBER)
    chat_member_ensure(chat=chat, person=member, role=ChatMember.Role.MEMBER)
    chat_member_ensure(chat=chat, person=admin, role=ChatMember.Role.ADMIN)
    for user, person in ((OWNER, owner), (MEMBER, member), (ADMIN, admin), (OUTSIDER, outsider)):
        actor_get_or_create(
            channel="telegram", user_id=user["id"], display_name=user["first_name"], person=person
        )
    return chat


@pytest.fixture
def beat():
    heartbeat_beat(name=DISPATCHER_HEARTBEAT, host="test")


def ask(tg: FakeTelegram, user: dict, text: str) -> str:
    """Send `text` in the group as `user`; what the bot answers (Telegram's HTML parse passes)."""
    from bots.services import telegram_update_process

    outcome = telegram_update_process(
        tg.message(group_chat(GROUP_ID, "ops"), user, text), identity=BOT
    )
    shown = []
    for row in outcome.outbound:
        error, visible = check_html(row.payload["text"])
        assert error is None, error
        shown.append(visible)
    return "\n".join(shown)


def test_a_member_sees_the_chats_schedules_without_prompts(
    fake_telegram, group, make_schedule, beat
):
    hourly = make_schedule(chat=group, prompt="Summarise the secret incident list")
    other_room = make_schedule()  # the team room's: not listed here
    answer = ask(fake_telegram, MEMBER, "/schedules")
    assert "Schedules of this chat:" in answer
    assert f"#{hourly.pk} Every hour (UTC)" in answer
    assert "next " in answer and "no run yet" in answer
    assert f"#{other_room.pk} " not in answer
    assert "secret incident" not in answer  # the group may hold people the hub does not know
    assert WILL_NOT_FIRE not in answer
    # The owner's own schedule is marked for them.
    assert f"#{hourly.pk} Every hour (UTC) (yours)" in ask(fake_telegram, OWNER, "/schedules")


def test_the_last_runs_status_is_shown(fake_telegram, group, make_schedule, owner, beat):
    schedule = make_schedule(chat=group)
    ScheduleRun.objects.create(
        schedule=schedule, slot_at=timezone.now(), status=ScheduleRun.Status.FAILED
    )
    assert "last run: failed" in ask(fake_telegram, MEMBER, "/schedules")


@pytest.mark.parametrize("who", [OUTSIDER, STRANGER])
def test_people_who_are_not_members_see_nothing(fake_telegram, group, make_schedule, who):
    schedule = make_schedule(chat=group)
    answer = ask(fake_telegram, who, "/schedules")
    assert "Only members of this chat see its schedules" in answer
    assert f"#{schedule.pk}" not in answer
    answer = ask(fake_telegram, who, f"/schedules run {schedule.pk}")
    assert "Only members" in answer
    assert not schedule.runs.exists()


def test_another_member_cannot_pause_or_run_someone_elses_schedule(
    fake_telegram, group, make_schedule
):
    schedule = make_schedule(chat=group)
    for verb in ("pause", "run"):
        answer = ask(fake_telegram, MEMBER, f"/schedules {verb} {schedule.pk}")
        assert answer == (
            f"Only its owner, this chat's owners and admins, and staff can {verb} "
            f"schedule #{schedule.pk}."
        )
    schedule.refresh_from_db()
    assert schedule.enabled and not schedule.runs.exists()
    assert not Turn.objects.filter(chat=group).exists()


def test_the_owner_pauses_and_resumes_and_an_admin_runs_it_now(
    fake_telegram, group, make_schedule, settings
):
    schedule = make_schedule(chat=group)
    assert ask(fake_telegram, OWNER, f"/schedules pause {schedule.pk}") == (
        f"Schedule #{schedule.pk} is paused."
    )
    schedule.refresh_from_db()
    assert not schedule.enabled and schedule.paused_reason == "paused from telegram by olivia"
    assert "paused: paused from telegram by olivia" in ask(fake_telegram, MEMBER, "/schedules")
    assert "runs again" in ask(fake_telegram, ADMIN, f"/schedules resume {schedule.pk}")
    schedule.refresh_from_db()
    assert schedule.enabled
    assert ask(fake_telegram, ADMIN, f"/schedules run {schedule.pk}") == (
        f"Schedule #{schedule.pk} runs now."
    )
    run = schedule.runs.get()
    assert run.status == ScheduleRun.Status.RUNNING and run.turn.chat == group
    # However often someone asks, one open run at a time.
    assert "already running" in ask(fake_telegram, OWNER, f"/schedules run {schedule.pk}")
    assert schedule.runs.count() == 1


def test_a_schedule_of_another_chat_is_not_found_even_for_its_owner(
    fake_telegram, group, make_schedule
):
    elsewhere = make_schedule()  # the owner's, in the team room
    answer = ask(fake_telegram, OWNER, f"/schedules pause {elsewhere.pk}")
    assert answer == f"There is no schedule #{elsewhere.pk} in this chat."
    elsewhere.refresh_from_db()
    assert elsewhere.enabled


def test_without_a_scheduler_heartbeat_the_answer_says_schedules_will_not_fire(
    fake_telegram, group, make_schedule
):
    make_schedule(chat=group)
    answer = ask(fake_telegram, MEMBER, "/schedules")
    assert answer.startswith("⚠️ No scheduler has ever run: schedules will not fire")
    heartbeat_beat(name=DISPATCHER_HEARTBEAT, host="test", now=timezone.now())
    assert WILL_NOT_FIRE not in ask(fake_telegram, MEMBER, "/schedules")
    # Silent for ten minutes: said again.
    heartbeat_beat(
        name=DISPATCHER_HEARTBEAT, host="test", now=timezone.now() - timedelta(minutes=10)
    )
    answer = ask(fake_telegram, MEMBER, "/schedules")
    assert "No scheduler has run for 10 minutes: schedules will not fire" in answer


def test_usage_for_anything_else(fake_telegram, group):
    assert ask(fake_telegram, MEMBER, "/schedules delete 3").startswith("Usage: /schedules")


def test_a_telegram_administrator_of_the_group_may_pause(
    fake_telegram, group, make_schedule, make_person
):
    """The bridge reads the group's administrators first (`uses_roles`): a linked member whom
    Telegram lists as an administrator becomes the chat's admin and may manage its schedules."""
    schedule = make_schedule(chat=group)
    tess_user = tg_user(1006, "Tess")
    tess = make_person("tess")
    chat_member_ensure(chat=group, person=tess, role=ChatMember.Role.MEMBER)
    actor_get_or_create(channel="telegram", user_id=1006, display_name="Tess", person=tess)
    fake_telegram.set_administrators(GROUP_ID, [tess_user])
    assert ask(fake_telegram, tess_user, f"/schedules pause {schedule.pk}") == (
        f"Schedule #{schedule.pk} is paused."
    )
    schedule.refresh_from_db()
    assert not schedule.enabled
