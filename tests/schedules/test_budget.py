"""A scheduled run over a budget (the chat's, its owner's or the hub's) does not happen: the
budgets' turn gate ends its turn before the model is called, and the run is recorded as
`skipped` with the reason, not delivered and not counted as a failure."""

from datetime import timedelta

import pytest

from budgets.models import Budget
from budgets.services import budget_save
from schedules.dispatch import dispatch
from schedules.models import ScheduleRun
from tests.schedules.conftest import T0
from tests.schedules.test_receipts import run_turn_of
from usage.models import Kind
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
