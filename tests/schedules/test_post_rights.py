"""A schedule posts in its owner's name, so creating, enabling, running it now and every run
need the right to post in its chat (`chats.selectors.chat_may_post`), not only to read it:
someone added read-only to another person's `/v1` conversation gets nowhere, and a
schedule of theirs (made before the rule) is paused at the next pass, its owner told."""

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client

from chats.models import ChatKind, ChatMember, Message, PersonNotice, Turn
from chats.services import chat_get_or_create, chat_member_ensure
from schedules.dispatch import dispatch, start_due_runs
from schedules.models import Schedule, ScheduleRun
from schedules.services import schedule_create, schedule_resume, schedule_run_now
from tests.schedules.conftest import T0

pytestmark = pytest.mark.django_db

SLOT = T0 + timedelta(hours=1)
CRON = {
    "prompt": "Say I resign",
    "kind": "cron",
    "cron": "0 9 * * 1-5",
    "timezone": "UTC",
    "catch_up": "skip",
    "mode": "chat",
}
READ_ONLY = "only its owner speaks in this conversation; its other members read it"


def client_for(person) -> Client:
    client = Client()
    client.force_login(person)
    return client


@pytest.fixture
def conversation(owner, member):
    """Olivia's `/v1` conversation, with Marco added to read it."""
    chat, _ = chat_get_or_create(channel="openai", chat_id="olivia-conv", kind=ChatKind.API)
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=member)
    return chat


@pytest.fixture
def planted(conversation, member):
    """A schedule of Marco's in her conversation, as one made before the rule was stored."""
    return Schedule.objects.create(
        owner=member,
        chat=conversation,
        prompt="Say I resign",
        kind="cron",
        cron="0 * * * *",
        timezone="UTC",
        anchor_at=T0,
        next_fire_at=SLOT,
        created_at=T0,
    )


def test_a_read_only_member_cannot_create_a_schedule_on_the_panel(conversation, member, owner):
    marco = client_for(member)
    panel = marco.get(f"/chats/{conversation.chat_key}/schedules")
    assert panel.status_code == 200 and 'id="schedule-create"' not in panel.content.decode()
    assert READ_ONLY in panel.content.decode()  # says why
    assert marco.post(f"/chats/{conversation.chat_key}/schedules", CRON).status_code == 403
    with pytest.raises(PermissionDenied, match=READ_ONLY):
        schedule_create(owner=member, chat=conversation, prompt="hi", kind="cron", cron="0 9 * * *")
    assert not Schedule.objects.exists()
    # Its owner may: she speaks there.
    olivia = client_for(owner)
    assert (
        'id="schedule-create"'
        in olivia.get(f"/chats/{conversation.chat_key}/schedules").content.decode()
    )
    assert olivia.post(f"/chats/{conversation.chat_key}/schedules", CRON).status_code == 302
    assert Schedule.objects.get().owner == owner


def test_a_read_only_members_schedule_cannot_be_enabled_or_run_now(planted, member, owner):
    Schedule.objects.filter(pk=planted.pk).update(enabled=False, paused_reason="paused")
    marco = client_for(member)
    resumed = marco.post(f"/schedules/{planted.pk}/resume", follow=True)
    assert READ_ONLY in resumed.content.decode()
    assert marco.post(f"/schedules/{planted.pk}/run", {"back": "chat"}).status_code == 403
    # Nor by the conversation's owner, who may manage it: the words would be Marco's.
    with pytest.raises(PermissionDenied, match=READ_ONLY):
        schedule_resume(schedule=planted, by=owner)
    with pytest.raises(PermissionDenied, match=READ_ONLY):
        schedule_run_now(schedule=planted, by=owner)
    planted.refresh_from_db()
    assert not planted.enabled and not planted.runs.exists()
    assert not Message.objects.exists() and not Turn.objects.exists()


def test_a_read_only_members_enabled_schedule_is_paused_and_its_owner_told(planted, member):
    assert dispatch(now=T0 + timedelta(seconds=5)).paused == 1
    planted.refresh_from_db()
    assert not planted.enabled
    assert planted.paused_reason == f"its owner may not post in this chat: {READ_ONLY}"
    assert dispatch(now=SLOT + timedelta(seconds=1)).claimed == 0
    assert not Message.objects.exists() and not Turn.objects.exists()
    [notice] = PersonNotice.objects.filter(person=member)
    assert f"Your schedule #{planted.pk}" in notice.text and READ_ONLY in notice.text


def test_a_run_due_when_its_owner_lost_the_right_is_skipped_saying_why(planted, member):
    run = ScheduleRun.objects.create(schedule=planted, slot_at=SLOT)
    start_due_runs(SLOT + timedelta(seconds=1))
    run.refresh_from_db()
    assert run.status == ScheduleRun.Status.SKIPPED
    assert READ_ONLY in run.reason
    assert not Message.objects.exists() and not Turn.objects.exists()
    assert PersonNotice.objects.filter(person=member).count() == 1


def test_outsiders_and_other_chats_members_get_the_404_of_a_missing_chat(
    conversation, planted, outsider, make_person, team_chat
):
    elsewhere = make_person("ada")
    chat_member_ensure(chat=team_chat, person=elsewhere)  # a member of another chat
    for person in (outsider, elsewhere):
        client = client_for(person)
        assert client.post(f"/chats/{conversation.chat_key}/schedules", CRON).status_code == 404
        assert client.post(f"/schedules/{planted.pk}/run").status_code == 404
        with pytest.raises(PermissionDenied):
            schedule_create(
                owner=person, chat=conversation, prompt="hi", kind="cron", cron="0 9 * * *"
            )
    assert Schedule.objects.count() == 1
