"""The Telegram part of `chat_may_post`: a hub membership of a group's chat outlives leaving
the group or a ban, so the bridge's check asks the Bot API (getChatMember, the fake server
on loopback) and schedules ask it through `chats.posting`, never importing the bridge."""

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.utils import timezone
from freezegun import freeze_time

from bots.models import OutboundMessage
from bots.post_rights import MEMBER_STATUS_SECONDS
from chats.models import ChatKind, ChatMember, Message, Turn
from chats.selectors import chat_may_post
from chats.services import chat_member_ensure
from schedules.dispatch import dispatch
from schedules.models import ScheduleRun
from schedules.services import schedule_create, schedule_run_now
from tests.fakes.telegram_server import FakeTelegram
from tests.schedules.agent_helpers import beat, call, in_group, said
from tests.schedules.conftest import T0

pytestmark = pytest.mark.django_db

GROUP = -100
OLIVIA, MARCO = 10, 11
SLOT = T0 + timedelta(hours=1)


@pytest.fixture
def fake_telegram(settings):
    with FakeTelegram() as tg:
        tg.configure(settings)
        yield tg


@pytest.fixture
def group(owner, member, fake_telegram):
    """A Telegram group where olivia (user 10, its admin) and marco (user 11) wrote, both
    linked to their hub accounts and in the group as Telegram says."""
    said("hi", chat_id=str(GROUP), user=str(OLIVIA), kind=ChatKind.GROUP, person=owner)
    chat = said("hi", chat_id=str(GROUP), user=str(MARCO), kind=ChatKind.GROUP, person=member).chat
    ChatMember.objects.filter(chat=chat, person=owner).update(role=ChatMember.Role.ADMIN)
    fake_telegram.join(GROUP, OLIVIA)
    fake_telegram.join(GROUP, MARCO)
    return chat


def told_in_private(user_id: int) -> list[str]:
    rows = OutboundMessage.objects.filter(telegram_chat_id=user_id)
    return [row.payload["text"] for row in rows.order_by("id")]


def marcos_schedule(member, group):
    with freeze_time(T0):
        return schedule_create(
            owner=member, chat=group, prompt="Post the standup", kind="cron", cron="0 * * * *"
        )


def later(seconds: int):
    """A moment past the kept answers of Telegram (bots.post_rights.MEMBER_STATUS_SECONDS)."""
    return freeze_time(timezone.now() + timedelta(seconds=seconds))


def forget_kept_answers():
    """As a minute later: Telegram's kept answers about marco in the group have expired."""
    cache.delete(f"bots:member-status:{GROUP}:{MARCO}")


def test_left_and_banned_members_may_not_post_as_telegram_says(group, member, fake_telegram):
    assert chat_may_post(member, group)
    asked = len(fake_telegram.calls_of("getChatMember"))
    fake_telegram.leave(GROUP, MARCO)
    # Telegram's answer is kept for a minute: posting from the dashboard asks it once.
    assert chat_may_post(member, group)
    assert len(fake_telegram.calls_of("getChatMember")) == asked
    with later(MEMBER_STATUS_SECONDS + 1):
        verdict = chat_may_post(member, group)
    assert not verdict and verdict.reason == "marco is no longer in this Telegram group"
    fake_telegram.ban(GROUP, MARCO)
    with later(2 * MEMBER_STATUS_SECONDS + 2):
        assert chat_may_post(member, group).reason == "marco was banned from this Telegram group"
    asked = fake_telegram.calls_of("getChatMember")[-1].params
    assert int(asked["chat_id"]) == GROUP and int(asked["user_id"]) == MARCO


def test_an_unsure_answer_is_not_kept(group, member, fake_telegram):
    fake_telegram.fail_next("getChatMember", status=502, description="Bad Gateway")
    verdict = chat_may_post(member, group)
    assert not verdict and verdict.unsure
    assert chat_may_post(member, group)  # asked again at once, and kept from now on


def test_a_member_without_a_linked_telegram_account_may_not_post_in_the_group(group, make_person):
    reader = make_person("rita")
    chat_member_ensure(chat=group, person=reader)  # added on the dashboard to read it
    verdict = chat_may_post(reader, group)
    assert not verdict and "no Telegram account linked" in verdict.reason


def test_a_private_chat_is_its_own_users_alone(owner, member, fake_telegram):
    dm = said("hi", chat_id=str(OLIVIA), user=str(OLIVIA), kind=ChatKind.DM, person=owner).chat
    chat_member_ensure(chat=dm, person=member)
    assert chat_may_post(owner, dm)
    assert not chat_may_post(member, dm)
    assert not fake_telegram.calls_of("getChatMember")  # known without asking


def test_a_member_who_left_cannot_create_or_run_a_schedule(group, member, fake_telegram):
    schedule = marcos_schedule(member, group)
    fake_telegram.leave(GROUP, MARCO)
    forget_kept_answers()
    with pytest.raises(PermissionDenied, match="no longer in this Telegram group"):
        marcos_schedule(member, group)
    with pytest.raises(PermissionDenied, match="no longer in this Telegram group"):
        schedule_run_now(schedule=schedule, by=member)
    assert not schedule.runs.exists()


def test_the_agent_tool_refuses_a_banned_member(group, member, fake_telegram):
    beat()
    asked = in_group("remind us at 9 every day", user=str(MARCO), name="Marco")
    fake_telegram.ban(GROUP, MARCO)
    forget_kept_answers()
    answer = call(asked, action="create", cron="0 9 * * *", prompt="Post the standup.")
    assert "banned from this Telegram group" in answer
    assert not member.schedules.exists()


def test_a_run_after_the_owner_left_is_not_run_and_the_owner_is_told(group, member, fake_telegram):
    schedule = marcos_schedule(member, group)
    fake_telegram.leave(GROUP, MARCO)
    dispatch(now=SLOT + timedelta(seconds=1))
    run = schedule.runs.get()
    assert run.status == ScheduleRun.Status.SKIPPED
    assert run.reason == (
        "schedule paused: its owner may not post in this chat: "
        "marco is no longer in this Telegram group"
    )
    schedule.refresh_from_db()
    assert not schedule.enabled and "no longer in this Telegram group" in schedule.paused_reason
    assert not Message.objects.filter(metadata__schedule=schedule.pk).exists()
    assert not Turn.objects.exists()
    [told] = told_in_private(MARCO)  # in his own private chat with the bot
    assert "did not run" in told and "no longer in this Telegram group" in told


def test_telegram_unable_to_answer_fails_the_run_without_pausing(group, member, fake_telegram):
    schedule = marcos_schedule(member, group)
    fake_telegram.fail_next("getChatMember", status=502, description="Bad Gateway")
    dispatch(now=SLOT + timedelta(seconds=1))
    run = schedule.runs.get()
    assert run.status == ScheduleRun.Status.FAILED
    assert "Telegram could not say whether marco is still in this group" in run.error
    schedule.refresh_from_db()
    assert schedule.enabled and schedule.consecutive_failures == 1
    assert not Turn.objects.exists()
    [told] = told_in_private(MARCO)
    assert f"Your schedule #{schedule.pk}" in told and "Telegram could not say" in told


def test_another_group_member_cannot_run_someone_elses_schedule(group, member, make_person):
    gina = make_person("gina")
    said("hi", chat_id=str(GROUP), user="13", kind=ChatKind.GROUP, person=gina)
    schedule = marcos_schedule(member, group)
    with pytest.raises(PermissionDenied):
        schedule_run_now(schedule=schedule, by=gina)
    assert not schedule.runs.exists()
