"""Who spends: the trigger's author; an integration user's token owner (API v1); the
schedule's owner for a scheduled run; nobody for an unlinked Telegram user (the chat and
the hub still count it)."""

from datetime import date, timedelta

import pytest
from django.utils import timezone

from chats.api.services import api_actor_namespace
from schedules.models import Schedule
from tests.usage.helpers import say
from usage.models import Kind, UsageRecord
from usage.selectors import spend
from usage.services import attribution_of_trigger, usage_record_model_work

pytestmark = pytest.mark.django_db


def spent(turn, tokens=100):
    return usage_record_model_work(
        kind=Kind.TURN,
        chat_id=turn.chat_id,
        turn=turn,
        model="m",
        calls=1,
        prompt_tokens=tokens,
        completion_tokens=0,
    )


def this_year():
    today = timezone.now().date()
    return {"start": today - timedelta(days=1), "end": today + timedelta(days=1)}


def test_a_linked_author_spends_for_their_turn(owner):
    record = spent(say("hi", channel="web", user=str(owner.pk), person=owner))
    assert record.person == owner and record.kind == Kind.TURN


def test_an_integration_user_spends_against_the_token_owner(owner, outsider):
    turn = say("hi", user="crm-user-7", actor_namespace=api_actor_namespace(owner))
    record = spent(turn)
    assert record.person == owner
    assert spend(**this_year(), person_id=owner.pk).prompt_tokens == 100
    assert spend(**this_year(), person_id=outsider.pk).prompt_tokens == 0


def test_a_forged_namespace_is_nobody():
    assert (
        attribution_of_trigger(say("x", actor_namespace="owner:abc").trigger_id).person_id is None
    )


def test_an_unlinked_telegram_user_counts_for_the_chat_and_hub_only(owner):
    turn = say("hi", channel="telegram", chat_id="-100", user="tg-42")
    record = spent(turn, tokens=70)
    assert record.person is None and record.chat_id == turn.chat_id
    assert spend(**this_year(), chat_id=turn.chat_id).prompt_tokens == 70
    assert spend(**this_year()).prompt_tokens == 70  # the hub
    assert spend(**this_year(), person_id=owner.pk).prompt_tokens == 0


def test_a_scheduled_run_spends_against_the_schedules_owner(owner, team_chat):
    schedule = Schedule.objects.create(
        owner=owner, chat=team_chat, prompt="report", kind=Schedule.Kind.ONCE
    )
    turn = say(
        "report",
        channel=team_chat.channel,
        chat_id=team_chat.external_id,
        user=str(schedule.pk),
        actor_namespace="schedule",
        metadata={"schedule": schedule.pk, "schedule_run": 1},
    )
    record = spent(turn)
    assert record.kind == Kind.SCHEDULED and record.person == owner


def test_a_scheduled_runs_payer_is_the_one_its_trigger_names(owner, member, team_chat):
    """Who pays is fixed with the run's prompt: neither deleting the schedule nor another
    owner since changes it; a payer whose account is gone spends as nobody (the record is
    still written, against the chat and the hub)."""
    schedule = Schedule.objects.create(
        owner=owner, chat=team_chat, prompt="report", kind=Schedule.Kind.ONCE
    )

    def run(payer):
        return say(
            "report",
            channel=team_chat.channel,
            chat_id=team_chat.external_id,
            user=str(schedule.pk),
            actor_namespace="schedule",
            metadata={"schedule": schedule.pk, "schedule_run": 1, "payer": payer},
        )

    before, gone = run(member.pk), run(10**9)
    schedule.delete()
    assert spent(before).person == member
    record = spent(gone, tokens=30)
    assert record.person is None and record.chat_id == team_chat.pk
    assert spend(**this_year(), chat_id=team_chat.pk).prompt_tokens == 130


def test_spend_is_bounded_by_its_days(owner):
    spent(say("hi", channel="web", user=str(owner.pk), person=owner))
    today = timezone.now().date()
    assert spend(start=today, end=today, person_id=owner.pk).tokens == 0
    assert spend(start=today, end=today + timedelta(days=1), person_id=owner.pk).tokens == 100
    assert spend(start=date(2000, 1, 1), end=today, person_id=owner.pk).tokens == 0
    assert UsageRecord.objects.count() == 1
