"""The agent's `schedule` tool: the person behind the trigger owns what it creates (an author
without a person, a scheduled run and a review create nothing); created at once in the
owner's private chat, proposed in a shared one; validation messages name the wrong argument;
list, pause, resume and delete only this chat's schedules, as the services allow; and every
answer says plainly when no scheduler runs."""

from datetime import UTC, datetime, timedelta

import pytest

from chats.agent.registry import ORIGIN_REVIEW, TurnContext, registry
from chats.agent.turns import message_received
from chats.models import ChatKind, Message
from chats.services import message_ingest
from operations.services import heartbeat_beat
from schedules.dispatch import dispatch
from schedules.models import Schedule, ScheduleRun
from schedules.selectors import DISPATCHER_HEARTBEAT
from tests.fakes import openai_replies as replies
from tests.schedules.agent_helpers import beat, call, context_of, in_group, said
from tests.turns import run

pytestmark = pytest.mark.django_db

MONDAYS = {"action": "create", "cron": "0 9 * * 1", "timezone": "Europe/Berlin"}


def in_dm(text="remind me", person=None):
    return said(text, chat_id="10", user="10", name="Olivia", kind=ChatKind.DM, person=person)


def test_the_tool_is_registered_for_every_channel():
    for channel in ("web", "telegram", "cli", "api"):
        assert "schedule" in {tool.name for tool in registry.tools_for(channel)}


def test_in_the_owners_private_chat_it_is_created_enabled(owner, olivia_dm):
    beat()
    answer = call(in_dm(), **MONDAYS, prompt="Remind me of the planning meeting.")
    schedule = Schedule.objects.get()
    assert answer.startswith(f"Created schedule #{schedule.pk} (At 09:00, only on Monday")
    assert "owned by olivia; next run: " in answer
    assert answer.endswith((" CET.", " CEST."))  # in the schedule's own zone
    assert (schedule.owner, schedule.chat, schedule.timezone) == (owner, olivia_dm, "Europe/Berlin")
    assert schedule.enabled and schedule.approval == Schedule.Approval.APPROVED
    assert schedule.prompt == "Remind me of the planning meeting." and schedule.mode == "chat"
    assert "Warning" not in answer


def test_in_a_group_it_waits_for_a_chat_admin(member, group):
    beat()
    message = in_group(user="11", name="Marco")
    answer = call(message, **MONDAYS, prompt="Remind everyone of the planning meeting.")
    schedule = Schedule.objects.get()
    assert answer.startswith(f"Proposed schedule #{schedule.pk}")
    assert "waits for a chat admin's approval" in answer and "does not run before" in answer
    assert schedule.owner == member and schedule.chat == group
    assert not schedule.enabled and schedule.approval == Schedule.Approval.PENDING
    assert schedule.paused_reason == "waiting for a chat admin's approval"
    # The dispatcher never claims it, however much time passes.
    assert dispatch(now=schedule.next_fire_at + timedelta(seconds=1)).claimed == 0


def test_a_web_room_is_shared_whoever_asks(owner, team_chat):
    beat()
    message = message_ingest(
        channel="web", chat_id="team-room", user_id=str(owner.pk), text="remind us", person=owner
    ).message
    call(message, action="create", every=60, prompt="Check the queue.")
    assert Schedule.objects.get().approval == Schedule.Approval.PENDING


def test_an_unlinked_telegram_user_cannot_create_one(group):
    beat()
    message = in_group(user="13", name="Stranger")
    assert message.actor.person is None
    answer = call(message, **MONDAYS, prompt="Spam everyone.")
    assert answer.startswith("Error: the author of this message has no hub account")
    assert "Nothing changed" in answer and not Schedule.objects.exists()


def test_an_integrations_user_without_a_person_cannot_create_one(owner):
    beat()
    # An API token owner's integration speaks as its own user (namespace owner:<id>).
    message = message_ingest(
        channel="api",
        chat_id=f"{owner.pk}:report",
        user_id="reporting-bot",
        actor_namespace=f"owner:{owner.pk}",
        chat_kind=ChatKind.API,
        text="every hour, summarise",
        member=owner,
    ).message
    assert message.actor.person is None
    answer = call(message, action="create", every=60, prompt="Summarise.")
    assert "has no hub account" in answer and not Schedule.objects.exists()


def test_an_inactive_person_cannot_create_one(owner, olivia_dm):
    beat()
    message = in_dm()
    owner.is_active = False
    owner.save()
    assert "has no hub account" in call(message, **MONDAYS, prompt="x")
    assert not Schedule.objects.exists()


def test_a_scheduled_run_cannot_create_schedules(owner, make_schedule, team_chat):
    beat()
    schedule = make_schedule()
    run_record = ScheduleRun.objects.create(schedule=schedule, slot_at=datetime.now(UTC))
    from schedules.services import schedule_run_start

    schedule_run_start(run_id=run_record.pk)
    trigger = Message.objects.select_related("actor").get(pk=schedule.runs.get().trigger_id)
    # Even if the run's context named a person, a schedule's own message makes nothing.
    context = TurnContext(chat=team_chat, trigger=trigger, actor=trigger.actor, person=owner)
    from schedules.agent_tool import SCHEDULE_TOOL

    answer = SCHEDULE_TOOL.handler(context, {"action": "create", "every": 60, "prompt": "again"})
    assert answer.startswith("Error: a scheduled run cannot create schedules")
    answer = SCHEDULE_TOOL.handler(context, {"action": "delete", "id": schedule.pk})
    assert answer.startswith("Error: a scheduled run cannot delete schedules")
    assert list(Schedule.objects.all()) == [schedule]


def test_a_background_review_cannot_create_schedules(owner, olivia_dm):
    beat()
    context = context_of(in_dm(), origin=ORIGIN_REVIEW)
    from schedules.agent_tool import SCHEDULE_TOOL

    answer = SCHEDULE_TOOL.handler(context, {"action": "create", "every": 60, "prompt": "x"})
    assert "a background review cannot create" in answer and not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            {"cron": "0 25 * * *"},
            "Error in `cron`: cron expression '0 25 * * *': the hour field '25'",
        ),
        ({"cron": "0 9 * *"}, "Error in `cron`:"),
        (
            {"cron": "0 9 * * *", "timezone": "Europe/Berlim"},
            "Error in `timezone`: unknown time zone 'Europe/Berlim': use an IANA name (did you "
            "mean Europe/Berlin",
        ),
        ({"every": 1}, "Error in `every`: every 1 minute(s) is too often"),
        ({"at": "next tuesday"}, "Error in `at`: 'next tuesday' is not an ISO date and time"),
        ({"at": "2001-01-01T09:00"}, "Error in `at`: 2001-01-01T09:00:00+00:00 is in the past"),
        ({"cron": "0 9 * * *", "every": 60}, "Error: give exactly one of `cron`, `every` or `at`"),
        ({}, "Error: give exactly one of `cron`, `every` or `at`"),
    ],
)
def test_invalid_timing_tells_the_model_which_argument_is_wrong(
    owner, olivia_dm, arguments, expected
):
    beat()
    answer = call(in_dm(), action="create", prompt="Remind me.", **arguments)
    assert answer.startswith(expected), answer
    assert not Schedule.objects.exists()


def test_a_one_off_time_without_offset_is_read_in_the_given_zone(owner, olivia_dm):
    beat()
    call(in_dm(), action="create", at="2030-01-15T09:00", timezone="Europe/Berlin", prompt="x")
    schedule = Schedule.objects.get()
    assert schedule.kind == "once" and schedule.run_at == datetime(2030, 1, 15, 8, 0, tzinfo=UTC)


def test_list_shows_this_chats_schedules_with_next_run_and_last_receipt(
    owner, olivia_dm, make_schedule
):
    beat()
    elsewhere = make_schedule(prompt="Team room only")  # in the team room, not listed here
    call(in_dm(), **MONDAYS, prompt="Remind me of the planning meeting.", mode="isolated")
    mine = Schedule.objects.exclude(pk=elsewhere.pk).get()
    ScheduleRun.objects.create(
        schedule=mine,
        slot_at=datetime(2026, 7, 6, 7, 0, tzinfo=UTC),
        status=ScheduleRun.Status.FAILED,
        error="the model is down",
    )
    answer = call(in_dm(), action="list")
    assert answer.startswith("Schedules of this chat, newest first:")
    line = answer.splitlines()[1]
    assert line.startswith(f"- #{mine.pk} At 09:00, only on Monday (Europe/Berlin), mode isolated")
    assert "owner olivia, active; next run: " in line
    assert "last run: failed at 2026-07-06 09:00 CEST (the model is down)" in line
    assert "prompt: Remind me of the planning meeting." in line
    assert "Team room only" not in answer and f"#{elsewhere.pk} " not in answer


def test_list_says_when_there_are_none(owner, olivia_dm):
    beat()
    assert call(in_dm(), action="list") == "This chat has no schedules."


def test_the_owner_pauses_resumes_and_deletes_in_a_private_chat(owner, olivia_dm):
    beat()
    call(in_dm(), **MONDAYS, prompt="Remind me.")
    schedule = Schedule.objects.get()
    assert call(in_dm(), action="pause", id=schedule.pk) == f"Paused schedule #{schedule.pk}."
    schedule.refresh_from_db()
    assert not schedule.enabled and schedule.paused_reason == "paused by olivia"
    assert call(in_dm(), action="resume", id=schedule.pk).startswith(
        f"Resumed schedule #{schedule.pk}; next run: "
    )
    assert call(in_dm(), action="delete", id=schedule.pk) == f"Deleted schedule #{schedule.pk}."
    assert not Schedule.objects.exists()


def test_another_member_may_not_change_someone_elses_schedule(owner, member, group):
    beat()
    call(in_group(), **MONDAYS, prompt="Remind us.")  # olivia's, pending
    schedule = Schedule.objects.get()
    by_marco = in_group(user="11", name="Marco")
    for action in ("pause", "resume", "delete"):
        answer = call(by_marco, action=action, id=schedule.pk)
        assert answer.startswith("Error: Only its owner, the chat's admins and staff"), answer
    assert Schedule.objects.filter(pk=schedule.pk).exists()


def test_only_this_chats_schedules_are_reachable(owner, olivia_dm, make_schedule):
    beat()
    other = make_schedule()  # olivia's too, but in the team room
    for action in ("pause", "resume", "delete"):
        answer = call(in_dm(), action=action, id=other.pk)
        assert answer == f"Error: this chat has no schedule #{other.pk}."
    other.refresh_from_db()
    assert other.enabled


def test_a_pending_schedule_cannot_be_resumed_around_its_approval(owner, group):
    beat()
    call(in_group(), **MONDAYS, prompt="Remind us.")
    schedule = Schedule.objects.get()
    answer = call(in_group(), action="resume", id=schedule.pk)
    assert answer == (
        "Error: This schedule is waiting for a chat admin's approval. Nothing changed."
    )
    schedule.refresh_from_db()
    assert not schedule.enabled and schedule.approval == Schedule.Approval.PENDING


def test_every_answer_says_when_no_scheduler_ever_ran(owner, olivia_dm):
    warning = "Warning: no scheduler has ever run: schedules will not fire"
    created = call(in_dm(), **MONDAYS, prompt="Remind me.")
    assert created.startswith(warning) and "Created schedule #" in created
    assert call(in_dm(), action="list").startswith(warning)
    assert call(in_dm(), action="create", prompt="x").startswith(warning)
    assert call(in_dm(), action="pause", id=999).startswith(warning)


def test_every_answer_says_when_the_scheduler_stopped(owner, olivia_dm):
    heartbeat_beat(
        name=DISPATCHER_HEARTBEAT, host="test", now=datetime.now(UTC) - timedelta(minutes=10)
    )
    answer = call(in_dm(), action="list")
    assert answer.startswith(
        "Warning: no scheduler has run for 10 minutes: schedules will not fire until beat "
        "and the schedules worker are back."
    )


@pytest.mark.django_db(transaction=True)
def test_the_model_creates_one_through_a_turn(owner, olivia_dm, fake_llm):
    beat()
    fake_llm.script(
        replies.tool_calls(
            [("s1", "schedule", {**MONDAYS, "prompt": "Remind Olivia of the planning."})]
        ),
        replies.text("Done: every Monday at 9."),
    )
    run(message_received_for(in_dm("remind me every Monday at 9 of the planning")))
    schedule = Schedule.objects.get()
    assert schedule.owner == owner and schedule.enabled
    second = fake_llm.requests[1]
    result = next(m["content"] for m in second["messages"] if m.get("tool_call_id") == "s1")
    assert result.startswith(f"Created schedule #{schedule.pk}")


def message_received_for(message):
    from chats.services import IngestResult

    return message_received(IngestResult(message=message, created=True), enqueue=False)
