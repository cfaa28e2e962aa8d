"""A scheduled run over a budget (the chat's, its owner's or the hub's) does not happen: the
budgets' turn gate ends its turn before the model is called, and the run is recorded as
`skipped` with the reason, not delivered and not counted as a failure."""

from datetime import timedelta

import pytest

from budgets.models import Budget
from budgets.services import budget_save
from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import turn_claim
from chats.models import Turn
from schedules.dispatch import dispatch
from schedules.models import ScheduleRun
from schedules.services import schedule_delete, schedule_run_now
from tests.schedules.conftest import T0
from tests.schedules.test_receipts import run_turn_of
from usage.models import Kind, UsageRecord
from usage.selectors import spend
from usage.services import usage_record

pytestmark = pytest.mark.django_db

SLOT = T0 + timedelta(hours=1)


def test_a_run_over_the_chats_budget_is_skipped_with_the_reason(
    make_schedule, team_chat, make_person, fake_llm
):
    ada = make_person("ada", is_staff=True)
    budget_save(budget=Budget(scope="chat", chat=team_chat, monthly_tokens=1_000), by=ada)
    usage_record(
        kind=Kind.TURN, chat_id=team_chat.pk, person_id=None, model="m", prompt_tokens=1_000
    )
    schedule = make_schedule()
    dispatch(now=SLOT + timedelta(seconds=1))
    run = schedule.runs.get()
    turn = run_turn_of(run)
    run.refresh_from_db()
    schedule.refresh_from_db()
    assert fake_llm.requests == []  # the model was never called
    assert run.status == ScheduleRun.Status.SKIPPED
    assert run.reason.startswith("not run: This chat's monthly budget of 1,000 tokens")
    assert "set by ada" in run.reason
    assert schedule.consecutive_failures == 0 and schedule.enabled
    # The prompt and the answer stay in the chat, as for any message.
    assert turn.reply.metadata.get("refused") is True and run.trigger_id is not None


def test_a_run_under_the_budget_is_delivered(make_schedule, team_chat, make_person, fake_llm):
    from tests.fakes import openai_replies as replies

    ada = make_person("ada", is_staff=True)
    budget_save(budget=Budget(scope="chat", chat=team_chat, monthly_tokens=1_000_000), by=ada)
    fake_llm.script(replies.text("Nothing is open."))
    schedule = make_schedule()
    dispatch(now=SLOT + timedelta(seconds=1))
    run = schedule.runs.get()
    run_turn_of(run)
    run.refresh_from_db()
    assert run.status == ScheduleRun.Status.DELIVERED


def _run_now_then_delete(schedule, owner) -> int:
    """ "Run now", then delete the schedule before a worker claims the run's turn; the
    turn's id (the run's record went with its schedule)."""
    run = schedule_run_now(schedule=schedule, by=owner)
    assert run.status == ScheduleRun.Status.RUNNING and run.turn_id is not None
    schedule_delete(schedule=schedule, by=owner)
    assert not ScheduleRun.objects.filter(pk=run.pk).exists()
    return run.turn_id


def _claim_and_run(turn_id: int) -> Turn:
    claim = turn_claim(turn_id=turn_id, worker="test")
    return run_claimed_turn(claim.turn, provider=get_provider())


def test_who_pays_is_fixed_when_the_run_starts_and_outlives_its_schedule(
    make_schedule, owner, make_person, fake_llm
):
    """Who pays is the owner, fixed with the run's prompt: deleting the schedule before a
    worker claims the turn neither lifts the owner's 0-token cap nor loses the payer."""
    ada = make_person("ada", is_staff=True)
    budget_save(budget=Budget(scope="person", person=owner, monthly_tokens=0), by=ada)
    turn = _claim_and_run(_run_now_then_delete(make_schedule(), owner))
    assert fake_llm.requests == []  # refused before the model was called
    assert turn.reply.metadata.get("refused") is True
    assert turn.reply.text.startswith("Your monthly budget of 0 tokens, set by ada,")
    assert not UsageRecord.objects.filter(prompt_tokens__gt=0).exists()


def test_the_spend_of_a_deleted_schedules_run_is_its_owners(make_schedule, owner, fake_llm):
    from tests.fakes import openai_replies as replies

    fake_llm.script(replies.text("Nothing is open."))
    turn = _claim_and_run(_run_now_then_delete(make_schedule(), owner))
    assert turn.status == Turn.Status.COMPLETED
    record = UsageRecord.objects.get(turn=turn, kind=Kind.SCHEDULED)
    tokens = record.prompt_tokens + record.completion_tokens
    assert record.person_id == owner.pk and tokens > 0
    # The owner's month (what the usage pages and their budget read) holds it.
    month = spend(start=record.day, end=record.day + timedelta(days=1), person_id=owner.pk)
    assert month.tokens == tokens
