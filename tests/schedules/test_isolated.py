"""Isolated runs: the turn of a schedule in mode `isolated` sees only this schedule's
earlier runs (their prompts and replies), not the chat's conversation; its prompt and reply
are still stored in the chat. A chat-mode schedule, for contrast, sees the conversation."""

from datetime import timedelta

import pytest

from chats.agent.registry import registry
from chats.models import Message
from chats.services import message_ingest
from schedules.dispatch import dispatch
from schedules.history import isolated_history
from schedules.models import ScheduleRun
from tests.fakes import openai_replies as replies
from tests.schedules.agent_helpers import context_of
from tests.schedules.conftest import T0
from tests.schedules.test_receipts import run_turn_of

pytestmark = pytest.mark.django_db

SLOT = T0 + timedelta(hours=1)


def say_in_room(person, text):
    return message_ingest(
        channel="web", chat_id="team-room", user_id=str(person.pk), user_name="Marco", text=text
    ).message


def model_saw(request) -> str:
    return "\n".join(str(message.get("content")) for message in request["messages"])


def run_slot(schedule, slot):
    dispatch(now=slot + timedelta(seconds=1))
    run = schedule.runs.get(slot_at=slot)
    turn = run_turn_of(run)
    run.refresh_from_db()
    assert run.status == ScheduleRun.Status.DELIVERED, run.error
    return run, turn


def test_an_isolated_run_sees_its_earlier_runs_and_not_the_chat(make_schedule, member, fake_llm):
    schedule = make_schedule(mode="isolated")
    say_in_room(member, "Unrelated: the launch code word is BANANA.")
    fake_llm.script(replies.text("Report 1: two incidents open."))
    first, _ = run_slot(schedule, SLOT)
    assert "BANANA" not in model_saw(fake_llm.last_request)
    say_in_room(member, "Also unrelated: lunch is at noon.")

    fake_llm.script(replies.text("Report 2: one incident open."))
    second, turn = run_slot(schedule, SLOT + timedelta(hours=1))
    seen = model_saw(fake_llm.last_request)
    assert "BANANA" not in seen and "lunch is at noon" not in seen
    assert "Report 1: two incidents open." in seen  # the previous run's reply
    # The previous run's prompt and this run's prompt (the trigger, last).
    assert seen.count("Post the open incidents") == 2
    assert "Post the open incidents" in str(fake_llm.last_request["messages"][-1]["content"])
    # Stored in the chat like any run's, for its members to read.
    assert turn.reply.chat_id == schedule.chat_id
    assert turn.reply.text == "Report 2: one incident open."
    assert Message.objects.filter(chat=schedule.chat, text__contains="BANANA").exists()
    assert turn.prompt_report["history_scope"] == f"isolated schedule #{schedule.pk}"


def test_a_chat_mode_run_sees_the_conversation(make_schedule, member, fake_llm):
    schedule = make_schedule(mode="chat")
    say_in_room(member, "Unrelated: the launch code word is BANANA.")
    fake_llm.script(replies.text("ok"))
    run_slot(schedule, SLOT)
    assert "BANANA" in model_saw(fake_llm.last_request)


def test_another_schedules_runs_are_not_in_an_isolated_runs_context(
    make_schedule, member, fake_llm
):
    other = make_schedule(mode="isolated", prompt="Summarise the deploys")
    fake_llm.script(replies.text("Deploys: three."))
    run_slot(other, SLOT)
    schedule = make_schedule(mode="isolated", cron="30 * * * *")
    fake_llm.script(replies.text("ok"))
    run_slot(schedule, SLOT + timedelta(minutes=30))
    seen = model_saw(fake_llm.last_request)
    assert "Deploys: three." not in seen and "Summarise the deploys" not in seen


def test_a_persons_message_cannot_borrow_a_runs_narrow_context(make_schedule, member, fake_llm):
    schedule = make_schedule(mode="isolated")
    fake_llm.script(replies.text("ok"))
    run, _ = run_slot(schedule, SLOT)
    # A message claiming to be that run (in its metadata) is not the run's trigger.
    forged = message_ingest(
        channel="web",
        chat_id="team-room",
        user_id=str(member.pk),
        text="what did we say?",
        metadata={"schedule": schedule.pk, "schedule_run": run.pk},
    ).message
    assert isolated_history(context_of(forged)) is None
    assert registry.history_scope_for(context_of(forged)) is None
    # The run's own trigger gets the narrow scope.
    trigger = Message.objects.get(pk=run.trigger_id)
    scope = isolated_history(context_of(trigger))
    assert scope is not None and scope.message_ids == frozenset()  # no earlier runs


def test_a_failing_scope_provider_narrows_to_nothing(make_schedule, member, fake_llm, monkeypatch):
    """Fail narrow: an isolated turn never falls back to the whole chat."""
    schedule = make_schedule(mode="isolated")
    say_in_room(member, "Unrelated: the launch code word is BANANA.")

    def broken(context):
        raise RuntimeError("boom")

    monkeypatch.setattr(registry, "history_scopes", [broken])
    fake_llm.script(replies.text("ok"))
    run_slot(schedule, SLOT)
    assert "BANANA" not in model_saw(fake_llm.last_request)
