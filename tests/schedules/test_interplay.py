"""Where the four parts of schedules meet (the batched start, approvals, isolated runs, the
pages, `/schedules`, Telegram delivery, usage): a pending or rejected schedule never starts
and every surface says why in words that are true for the person asking; a run the batch
started keeps what isolated history, the usage ledger and the Telegram outbox rely on."""

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from freezegun import freeze_time

from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import turn_claim
from chats.models import Turn
from chats.services import message_ingest
from chats.slash_commands import CommandContext
from schedules.dispatch import dispatch
from schedules.history import isolated_history
from schedules.models import Schedule, ScheduleRun
from schedules.proposals import schedule_approval_decide, schedule_create_by_agent
from schedules.services import schedule_delete, schedule_pause
from schedules.slash_command import schedules_command
from tests.fakes import openai_replies as replies
from tests.schedules.agent_helpers import context_of
from tests.schedules.conftest import T0
from tests.schedules.test_receipts import run_turn_of

pytestmark = pytest.mark.django_db

SLOT = T0 + timedelta(hours=1)


def propose(chat, person, **fields):
    """A schedule the agent made for `person` in a shared chat: pending."""
    fields.setdefault("prompt", "Remind everyone of the planning meeting.")
    fields.setdefault("kind", "cron")
    fields.setdefault("cron", "0 9 * * 1")
    schedule = schedule_create_by_agent(owner=person, chat=chat, **fields)
    assert schedule.approval == Schedule.Approval.PENDING and not schedule.enabled
    return schedule


def client_for(person) -> Client:
    client = Client()
    client.force_login(person)
    return client


def slash(chat, person, args: str) -> str:
    context = CommandContext(channel="web", chat=chat, actor=None, person=person, args=args)
    return schedules_command(context)


# --- a pending or rejected schedule: never started, and told so -----------------------------


@pytest.mark.parametrize("verb", ["resume", "run"])
def test_slash_resume_or_run_of_a_pending_schedule_says_it_waits_for_approval(
    team_chat, member, verb
):
    schedule = propose(team_chat, member)  # marco's own schedule: he may manage it
    answer = slash(team_chat, member, f"{verb} {schedule.pk}")
    # Not "only its owner ... can": he is its owner. The reason is the approval.
    assert "Only its owner" not in answer
    assert "approval" in answer
    schedule.refresh_from_db()
    assert not schedule.enabled and not schedule.runs.exists()


def test_slash_resume_of_a_rejected_schedule_says_it_was_rejected(team_chat, owner, member):
    schedule = propose(team_chat, member)
    schedule_approval_decide(schedule_id=schedule.pk, decision="reject", person=owner)
    answer = slash(team_chat, member, f"resume {schedule.pk}")
    assert "Only its owner" not in answer and "rejected" in answer
    schedule.refresh_from_db()
    assert not schedule.enabled


def test_run_now_on_the_page_for_a_pending_schedule_is_a_message_not_an_error_page(
    team_chat, member
):
    schedule = propose(team_chat, member)
    client = client_for(member)
    response = client.post(f"/schedules/{schedule.pk}/run", {"back": "chat"})
    assert response.status_code == 302
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("approval" in text for text in shown), shown
    assert not schedule.runs.exists()
    # Resume, likewise, says why and changes nothing.
    response = client.post(f"/schedules/{schedule.pk}/resume", {"back": "chat"})
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert not schedule.enabled


def test_the_page_offers_no_resume_or_run_now_for_a_pending_schedule(team_chat, member):
    schedule = propose(team_chat, member)
    page = client_for(member).get(f"/chats/{team_chat.chat_key}/schedules").content.decode()
    entry = page.split(f'id="schedule-{schedule.pk}"', 1)[1].split("</li>", 1)[0]
    assert "data-resume" not in entry and "data-run-now" not in entry
    assert "data-delete" in entry  # its owner may still withdraw it


def test_an_edit_of_a_pending_schedule_does_not_enable_it(team_chat, member):
    schedule = propose(team_chat, member)
    response = client_for(member).post(
        f"/schedules/{schedule.pk}/edit",
        {
            "prompt": "Remind everyone.",
            "kind": "interval",
            "every": "60",
            "timezone": "UTC",
            "catch_up": "skip",
            "mode": "chat",
        },
    )
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert schedule.approval == Schedule.Approval.PENDING and not schedule.enabled
    assert dispatch(now=schedule.next_fire_at + timedelta(seconds=1)).claimed == 0


# --- what the batch writes is what the other parts read ------------------------------------


def test_a_batch_started_run_keeps_the_trigger_link_isolated_history_needs(make_schedule):
    schedule = make_schedule(mode="isolated")
    dispatch(now=SLOT + timedelta(seconds=1))
    run = schedule.runs.get()
    assert run.status == ScheduleRun.Status.RUNNING
    trigger = run.trigger
    assert trigger.metadata == {
        "schedule": schedule.pk,
        "schedule_run": run.pk,
        "mode": "isolated",
        "payer": schedule.owner_id,  # who pays, fixed now (budgets and usage read it)
    }
    scope = isolated_history(context_of(trigger))
    assert scope is not None and scope.reason == f"isolated schedule #{schedule.pk}"


def test_a_batch_started_runs_usage_is_scheduled_and_the_owners(make_schedule, owner, fake_llm):
    from usage.models import UsageRecord

    fake_llm.script(replies.text("Two incidents are open."))
    schedule = make_schedule()
    dispatch(now=SLOT + timedelta(seconds=1))
    run_turn_of(schedule.runs.get())
    records = UsageRecord.objects.filter(turn_id=schedule.runs.get().turn_id)
    assert records.exists()
    assert {(r.kind, r.person_id) for r in records} == {("scheduled", owner.pk)}


def test_deleting_a_schedule_while_its_run_is_under_way_lets_the_turn_finish(
    make_schedule, fake_llm
):
    fake_llm.script(replies.text("Two incidents are open."))
    schedule = make_schedule()
    dispatch(now=SLOT + timedelta(seconds=1))
    turn_id = schedule.runs.get().turn_id
    schedule_delete(schedule=schedule)
    # The turn is claimed and run as a worker would; its finish finds no run to settle.
    turn = run_claimed_turn(
        turn_claim(turn_id=turn_id, worker="test").turn, provider=get_provider()
    )
    assert turn.status == Turn.Status.COMPLETED
    assert not ScheduleRun.objects.filter(turn_id=turn_id).exists()


def test_an_isolated_run_whose_schedule_was_deleted_still_sees_no_chat_history(
    make_schedule, member, fake_llm
):
    """The batch starts runs while every turn worker is busy, so a schedule can be deleted
    (its run records with it) before its run's turn is claimed. An isolated schedule's turn
    then got the whole chat as its history."""
    schedule = make_schedule(mode="isolated")
    message_ingest(
        channel="web",
        chat_id="team-room",
        user_id=str(member.pk),
        user_name="Marco",
        text="Unrelated: the launch code word is BANANA.",
    )
    fake_llm.script(replies.text("Report: two incidents open."))
    dispatch(now=SLOT + timedelta(seconds=1))
    turn_id = schedule.runs.get().turn_id
    schedule_delete(schedule=schedule)
    turn = run_claimed_turn(
        turn_claim(turn_id=turn_id, worker="test").turn, provider=get_provider()
    )
    seen = "\n".join(str(m.get("content")) for m in fake_llm.last_request["messages"])
    assert "BANANA" not in seen and "Post the open incidents" in seen
    assert turn.prompt_report["history_scope"].startswith(f"isolated schedule #{schedule.pk}")


def test_a_persons_message_naming_a_deleted_run_gets_the_usual_history(make_schedule, member):
    schedule = make_schedule(mode="isolated")
    forged = message_ingest(
        channel="web",
        chat_id="team-room",
        user_id=str(member.pk),
        user_name="Marco",
        text="hello",
        metadata={"schedule": schedule.pk, "schedule_run": 999, "mode": "isolated"},
    ).message
    assert isolated_history(context_of(forged)) is None


# --- the admin -------------------------------------------------------------------------------


def test_the_admin_cannot_add_a_schedule_that_would_never_fire(admin_client, owner, team_chat):
    """A schedule added in the admin skipped the services: no validation, no owner check,
    no approval, and no `next_fire_at`, so it showed "enabled" and never fired. Schedules are
    made on the pages, with `manage.py schedule add` or by the agent's tool."""
    url = reverse("admin:schedules_schedule_add")
    assert admin_client.get(url).status_code == 403
    posted = admin_client.post(
        url,
        {
            "owner": owner.pk,
            "chat": team_chat.pk,
            "prompt": "Post the open incidents",
            "kind": "cron",
            "cron": "0 * * * *",
            "timezone": "UTC",
            "catch_up": "skip",
            "mode": "chat",
            "enabled": "on",
            "runs-TOTAL_FORMS": "0",
            "runs-INITIAL_FORMS": "0",
        },
    )
    assert posted.status_code == 403 and not Schedule.objects.exists()


def test_the_admin_still_shows_and_changes_a_pending_schedule_without_enabling_it(
    admin_client, team_chat, member
):
    schedule = propose(team_chat, member)
    url = reverse("admin:schedules_schedule_change", args=[schedule.pk])
    page = admin_client.get(url)
    assert page.status_code == 200
    schedule.refresh_from_db()
    assert not schedule.enabled and schedule.approval == Schedule.Approval.PENDING


def test_the_admin_cannot_turn_a_paused_schedule_back_on_around_the_services(
    admin_client, make_schedule
):
    """Ticking `enabled` in the admin kept the `next_fire_at` of before the pause, so the
    next pass recorded every slot of the pause as "missed: the hub was not running" (or ran
    a catch-up); a changed cron kept the old next slot. Resume and edit on the pages (staff
    may) compute the next slot from now."""
    schedule = make_schedule()
    with freeze_time(T0 + timedelta(minutes=5)):
        schedule_pause(schedule=schedule, reason="paused by olivia")
    later = T0 + timedelta(hours=5, minutes=1)
    with freeze_time(later):
        url = reverse("admin:schedules_schedule_change", args=[schedule.pk])
        admin_client.post(
            url,
            {
                "owner": schedule.owner_id,
                "chat": schedule.chat_id,
                "prompt": schedule.prompt,
                "kind": "cron",
                "cron": "30 * * * *",
                "timezone": "UTC",
                "catch_up": "skip",
                "mode": "chat",
                "enabled": "on",
                "paused_reason": "",
                "runs-TOTAL_FORMS": "0",
                "runs-INITIAL_FORMS": "0",
            },
        )
        dispatch(now=later)
    assert not schedule.runs.filter(status=ScheduleRun.Status.MISSED).exists()
    schedule.refresh_from_db()
    assert schedule.cron == "0 * * * *" and not schedule.enabled
