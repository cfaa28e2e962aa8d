"""Receipts: a run is `delivered` only when its turn completed and the reply is stored (web,
API, terminal); for Telegram the stored reply is queued for the bridge and
`awaiting_delivery` until the bridge confirms (test_telegram_delivery.py); a failed turn
fails the run with its error, and N failures in a row pause the schedule; a person's
interruption skips the run without counting."""

from datetime import timedelta

import pytest

from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import LEASE_EXPIRED, SUPERSEDED, turn_claim, turns_recover_stale
from chats.models import ChatKind, ChatMember, Turn
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from schedules.dispatch import dispatch, settle_unannounced
from schedules.models import ScheduleRun
from schedules.services import schedule_run_now
from tests.fakes import openai_replies as replies
from tests.fakes.telegram_server import FakeTelegram
from tests.schedules.conftest import T0

pytestmark = pytest.mark.django_db

SLOT = T0 + timedelta(hours=1)


def run_turn_of(run: ScheduleRun) -> Turn:
    """Run the run's turn here, as a worker would (the loop announces its outcome)."""
    run.refresh_from_db()
    claim = turn_claim(turn_id=run.turn_id, worker="test")
    return run_claimed_turn(claim.turn, provider=get_provider())


def test_a_completed_turn_with_a_stored_reply_is_delivered(make_schedule, fake_llm):
    fake_llm.script(replies.text("Two incidents are open."))
    schedule = make_schedule()
    dispatch(now=SLOT + timedelta(seconds=1))
    run = schedule.runs.get()
    turn = run_turn_of(run)
    assert turn.status == Turn.Status.COMPLETED
    run.refresh_from_db()
    assert run.status == ScheduleRun.Status.DELIVERED and run.finished_at is not None
    assert run.delivered_to == [
        {
            "channel": "web",
            "chat": "web:team-room",
            "message": turn.reply_id,
            "stored": True,
            "delivered": True,
        }
    ]
    assert turn.reply.text == "Two incidents are open."
    # The model saw the prompt as the trigger, from the schedule's actor.
    assert "Post the open incidents" in str(fake_llm.last_request["messages"][-1])


def test_a_reply_for_telegram_is_queued_for_the_bridge_but_not_claimed_delivered(
    make_schedule, owner, fake_llm, settings
):
    from bots.models import OutboundMessage

    telegram = FakeTelegram().start()  # asked whether the owner is still in the group
    telegram.configure(settings)
    # The owner wrote in the topic from her linked Telegram account (user 1001).
    topic = message_ingest(
        channel="telegram",
        chat_id="-100200",
        thread_id="7",
        chat_kind=ChatKind.TOPIC,
        user_id="1001",
        text="hello",
        person=owner,
        member=owner,
    ).chat
    telegram.join(-100200, 1001)
    try:
        schedule = make_schedule(chat=topic)
        dispatch(now=SLOT + timedelta(seconds=1))
    finally:
        telegram.stop()
    run = schedule.runs.get()
    assert run.trigger.chat == topic
    turn = run_turn_of(run)
    run.refresh_from_db()
    assert run.status == ScheduleRun.Status.AWAITING_DELIVERY
    assert run.delivered_to[0]["stored"] is True and run.delivered_to[0]["delivered"] is False
    # The reply waits in the outbox for its topic, answering nothing in Telegram.
    row = OutboundMessage.objects.get(turn=turn)
    assert (row.kind, row.telegram_chat_id, row.thread_id) == ("reply", -100200, 7)
    assert row.reply_to_message_id is None and row.status == "pending"


def test_a_reply_for_telegram_without_a_bot_fails_saying_why(make_schedule, owner, fake_llm):
    topic, _ = chat_get_or_create(channel="telegram", chat_id="-100200", kind=ChatKind.GROUP)
    chat_member_ensure(chat=topic, person=owner, role=ChatMember.Role.MEMBER)
    schedule = make_schedule(chat=topic)
    dispatch(now=SLOT + timedelta(seconds=1))
    run_turn_of(schedule.runs.get())
    run = schedule.runs.get()
    assert run.status == ScheduleRun.Status.FAILED
    assert "no Telegram bot is configured" in run.error
    schedule.refresh_from_db()
    assert schedule.consecutive_failures == 1


def test_failed_runs_record_the_error_and_pause_the_schedule_after_the_limit(
    make_schedule, fake_llm, settings
):
    settings.LLM_MAX_RETRIES = 0
    settings.SCHEDULES_PAUSE_AFTER_FAILURES = 2
    fake_llm.script(replies.error(500), replies.error(500))
    schedule = make_schedule()
    dispatch(now=SLOT + timedelta(seconds=1))
    first = schedule.runs.get()
    assert run_turn_of(first).status == Turn.Status.FAILED
    first.refresh_from_db()
    assert first.status == ScheduleRun.Status.FAILED and first.error
    schedule.refresh_from_db()
    assert schedule.enabled and schedule.consecutive_failures == 1
    second = schedule_run_now(schedule=schedule)
    run_turn_of(second)
    second.refresh_from_db()
    schedule.refresh_from_db()
    assert second.status == ScheduleRun.Status.FAILED
    assert not schedule.enabled
    assert schedule.paused_reason == "paused after 2 failed runs in a row"
    # Paused: the next slot is not claimed.
    assert dispatch(now=SLOT + timedelta(hours=1, seconds=1)).claimed == 0


def test_a_delivered_run_resets_the_failure_count(make_schedule, fake_llm, settings):
    settings.LLM_MAX_RETRIES = 0
    fake_llm.script(replies.error(500), replies.text("fine now"))
    schedule = make_schedule()
    for _ in range(2):
        run_turn_of(schedule_run_now(schedule=schedule))
    schedule.refresh_from_db()
    assert schedule.consecutive_failures == 0
    assert list(schedule.runs.order_by("id").values_list("status", flat=True)) == [
        "failed",
        "delivered",
    ]


def test_a_run_a_person_interrupted_is_skipped_and_one_whose_worker_died_failed(
    make_schedule,
):
    schedule = make_schedule()
    superseded = schedule_run_now(schedule=schedule)
    turn_claim(turn_id=superseded.turn_id, worker="w")
    # A person's message superseded it; the loop would announce it, the dispatcher's pass
    # settles it if nobody did.
    Turn.objects.filter(pk=superseded.turn_id).update(
        status=Turn.Status.INTERRUPTED, interrupt_reason=SUPERSEDED
    )
    assert settle_unannounced() == 1
    superseded.refresh_from_db()
    assert superseded.status == ScheduleRun.Status.SKIPPED
    assert superseded.reason == f"interrupted: {SUPERSEDED}"
    # A worker that died: the sweep marks the turn interrupted and announces nothing.
    died = schedule_run_now(schedule=schedule)
    turn_claim(turn_id=died.turn_id, worker="gone")
    Turn.objects.filter(pk=died.turn_id).update(lease_expires_at=T0)
    assert turns_recover_stale() == 1
    assert settle_unannounced() == 1
    died.refresh_from_db()
    assert died.status == ScheduleRun.Status.FAILED
    assert died.error == f"interrupted: {LEASE_EXPIRED}"
    schedule.refresh_from_db()
    assert schedule.consecutive_failures == 1  # the person's interruption did not count
