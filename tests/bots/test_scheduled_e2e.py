"""Scheduled runs into a Telegram forum topic end to end: the dispatcher task on the real
schedules worker (its own queue) starts the run, the turn worker answers with the fake model
and hands the reply to the bridge, the real bot process sends it into the topic through the
fake Bot API and its receipt (the message_id) lands on the run; a 403 fails the next run and
tells its owner in their private chat with the bot."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from chats.models import ChatKind, ChatMember, PersonNotice
from chats.services import actor_get_or_create, actor_link, chat_get_or_create, chat_member_ensure
from schedules.models import Schedule, ScheduleRun
from schedules.services import schedule_create, schedule_run_now
from schedules.tasks import dispatch as dispatch_task
from tests.bots.conftest import FORUM_ID
from tests.fakes import openai_replies as replies

pytestmark = pytest.mark.timeout(240)

TOPIC = 7
OWNER_TG = 1001


def wait_for_run(run_id: int, statuses: set[str], timeout: float = 60.0) -> ScheduleRun:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = ScheduleRun.objects.filter(pk=run_id).first()
        if run is not None and run.status in statuses:
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} is still {run.status if run else 'missing'}")


def test_a_scheduled_run_lands_in_its_forum_topic_and_a_403_fails_the_next(telegram_live, owner):
    tg, llm = telegram_live.tg, telegram_live.llm
    llm.script(replies.text("Three incidents are open."), replies.text("Still three."))
    topic, _ = chat_get_or_create(
        channel="telegram",
        chat_id=str(FORUM_ID),
        thread_id=str(TOPIC),
        kind=ChatKind.TOPIC,
        title="ops",
    )
    chat_member_ensure(chat=topic, person=owner, role=ChatMember.Role.MEMBER)
    # Her Telegram account (in the group, as the fake Bot API says): she may post there.
    actor_link(
        actor=actor_get_or_create(channel="telegram", user_id=OWNER_TG, display_name="O"),
        person=owner,
    )
    schedule = schedule_create(
        owner=owner,
        chat=topic,
        prompt="Post the open incidents",
        kind="interval",
        interval_minutes=60,
    )
    slot = timezone.now().replace(microsecond=0) - timedelta(seconds=1)
    Schedule.objects.filter(pk=schedule.pk).update(next_fire_at=slot, anchor_at=slot)
    telegram_live.stack.start_dispatcher()  # the dispatcher's own queue and worker
    dispatch_task.delay()
    deadline = time.monotonic() + 60
    while not schedule.runs.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    run = wait_for_run(schedule.runs.get().pk, {"delivered", "failed"})
    assert run.status == "delivered", run.error
    [sent] = tg.wait_for(lambda: tg.bot_messages(FORUM_ID, thread_id=TOPIC))
    assert sent.text == "Three incidents are open." and sent.reply_to is None
    assert run.delivered_to[0]["telegram_message_ids"] == [sent.message_id]
    assert run.delivered_to[0]["message_thread_id"] == TOPIC

    # The bot is removed from the group: the next run fails and its owner is told.
    tg.fail_next(
        "sendMessage",
        status=403,
        description="Forbidden: bot was kicked from the supergroup chat",
        when=lambda params: int(params["chat_id"]) == FORUM_ID,
        times=5,
    )
    second = schedule_run_now(schedule=schedule)
    second = wait_for_run(second.pk, {"delivered", "failed"})
    assert second.status == "failed" and "kicked" in second.error
    assert len(tg.bot_messages(FORUM_ID)) == 1
    [told] = tg.wait_for(lambda: tg.bot_messages(OWNER_TG), what="the owner told")
    assert "kicked" in told.text and not PersonNotice.objects.exists()
