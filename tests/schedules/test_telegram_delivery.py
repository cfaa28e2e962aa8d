"""Scheduled runs into Telegram, through the bridge's own delivery code and the fake Bot API
server (real HTTP): the reply lands in the forum topic (its message_thread_id, replying to
nothing) and the run records every part's message_id; a run is never `delivered` before every
part has one; a 403 (bot blocked or removed), a deleted topic or a vanished chat fail the run
with Telegram's reason, tell the owner (their private chat with the bot, else the dashboard)
and, after SCHEDULES_PAUSE_AFTER_FAILURES, pause the schedule saying so. Run it with
DATABASE_URL=postgres://... too."""

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from bots.bridge import TelegramBridge, build_bot
from bots.delivery import db
from bots.models import OutboundMessage
from bots.outbox import outbox_open
from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import turn_claim
from chats.models import ChatKind, ChatMember, PersonNotice
from chats.services import actor_get_or_create, actor_link, chat_get_or_create, chat_member_ensure
from schedules.dispatch import dispatch
from schedules.models import ScheduleRun
from schedules.services import schedule_run_delivered, schedule_run_now
from tests.fakes import openai_replies as replies
from tests.fakes.telegram_server import FakeTelegram
from tests.schedules.conftest import T0

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

FORUM_ID = -1001000000002
TOPIC = 7
SLOT = T0 + timedelta(hours=1)
OWNER_TELEGRAM_ID = 1001
BLOCKED = "Forbidden: bot was kicked from the supergroup chat"


@pytest.fixture
def fake_telegram(settings):
    with FakeTelegram() as tg:
        tg.configure(settings)
        settings.TELEGRAM_EDIT_INTERVAL_SECONDS = 0.05
        yield tg


@pytest.fixture
def topic(owner, fake_telegram):
    """The forum topic "ops", where the owner may post: her linked Telegram account is in
    the group, as Telegram says (a schedule posts only for someone who may)."""
    chat, _ = chat_get_or_create(
        channel="telegram",
        chat_id=str(FORUM_ID),
        thread_id=str(TOPIC),
        kind=ChatKind.TOPIC,
        title="ops",
    )
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.MEMBER)
    actor = actor_get_or_create(channel="telegram", user_id=OWNER_TELEGRAM_ID, display_name="O")
    actor_link(actor=actor, person=owner)
    fake_telegram.join(FORUM_ID, OWNER_TELEGRAM_ID)
    return chat


def run_turn_of(run: ScheduleRun):
    """Run the run's turn here, as a worker would (its outcome is announced, the run settled)."""
    run.refresh_from_db()
    claim = turn_claim(turn_id=run.turn_id, worker="test")
    return run_claimed_turn(claim.turn, provider=get_provider())


def work_outbox() -> None:
    """One pass of the bridge's outbox: each open row delivered (or failed) by its own code."""

    async def work():
        bridge = TelegramBridge(bot=build_bot(), mode="polling")
        async with bridge.bot:
            for row in await db(outbox_open):
                await bridge._deliver(row)

    async_to_sync(work)()


def scheduled_reply(make_schedule, topic, text: str, fake_llm) -> ScheduleRun:
    fake_llm.script(replies.text(text))
    schedule = make_schedule(chat=topic)
    dispatch(now=SLOT + timedelta(seconds=1))
    run = schedule.runs.get()
    run_turn_of(run)
    run.refresh_from_db()
    return run


def test_a_scheduled_reply_lands_in_its_forum_topic_with_its_message_id_on_the_run(
    make_schedule, topic, fake_llm, fake_telegram
):
    run = scheduled_reply(make_schedule, topic, "Two incidents are open.", fake_llm)
    assert run.status == ScheduleRun.Status.AWAITING_DELIVERY
    work_outbox()
    [sent] = fake_telegram.bot_messages(FORUM_ID)
    assert sent.thread_id == TOPIC and sent.reply_to is None
    assert sent.text == "Two incidents are open."
    run.refresh_from_db()
    assert run.status == ScheduleRun.Status.DELIVERED
    [receipt] = run.delivered_to
    assert receipt["channel"] == "telegram" and receipt["delivered"] is True
    assert receipt["telegram_chat_id"] == FORUM_ID and receipt["message_thread_id"] == TOPIC
    assert receipt["telegram_message_ids"] == [sent.message_id]
    assert receipt["message"] == run.turn.reply_id and "note" not in receipt


def test_a_long_reply_is_delivered_only_once_every_part_has_its_message_id(
    make_schedule, topic, fake_llm, fake_telegram
):
    paragraph = "Incident report line. " * 40
    text = "\n\n".join(["PART-ONE " + paragraph, *[paragraph] * 6, "PART-TWO " + paragraph])
    run = scheduled_reply(make_schedule, topic, text, fake_llm)
    # Telegram refuses the second part once (not for good): the bridge keeps the row open.
    fake_telegram.fail_next(
        "sendMessage",
        description="Bad Request: something odd",
        when=lambda params: "PART-TWO" in params.get("text", ""),
    )
    work_outbox()
    row = OutboundMessage.objects.get(turn_id=run.turn_id)
    assert row.status == "sending" and len(row.message_ids) == 1 and row.parts_sent == 1
    run.refresh_from_db()
    assert run.status == ScheduleRun.Status.AWAITING_DELIVERY  # one part is not the reply
    # A receipt missing a part's id confirms nothing either.
    incomplete = {"telegram_message_ids": row.message_ids, "parts": 2}
    assert schedule_run_delivered(run_id=run.pk, receipt=incomplete) is False
    work_outbox()  # the next pass sends only the missing part
    sent = fake_telegram.bot_messages(FORUM_ID, thread_id=TOPIC)
    assert len(sent) == 2 and "PART-TWO" in sent[1].text
    run.refresh_from_db()
    assert run.status == ScheduleRun.Status.DELIVERED
    assert run.delivered_to[0]["telegram_message_ids"] == [m.message_id for m in sent]
    assert run.delivered_to[0]["parts"] == 2


@pytest.mark.parametrize(
    "status, description",
    [
        (403, BLOCKED),
        (400, "Bad Request: message thread not found"),
        (400, "Bad Request: chat not found"),
    ],
)
def test_telegram_refusing_for_good_fails_the_run_and_tells_the_owner(
    make_schedule, topic, owner, fake_llm, fake_telegram, status, description
):
    run = scheduled_reply(make_schedule, topic, "Report", fake_llm)
    fake_telegram.fail_next("sendMessage", status=status, description=description)
    work_outbox()
    run.refresh_from_db()
    assert run.status == ScheduleRun.Status.FAILED
    assert description.split(": ", 1)[1].lower() in run.error.lower()  # PTB capitalises
    assert run.delivered_to[0]["delivered"] is False
    assert fake_telegram.bot_messages(FORUM_ID) == []
    run.schedule.refresh_from_db()
    assert run.schedule.consecutive_failures == 1 and run.schedule.enabled
    # In her own private chat with the bot (the dashboard tells those with none:
    # tests/schedules/test_post_rights.py).
    work_outbox()  # the words to the owner queued by the failure
    [told] = [m.text for m in fake_telegram.bot_messages(OWNER_TELEGRAM_ID)]
    assert f"schedule #{run.schedule_id}" in told and "“ops”" in told
    assert "paused" not in told and not PersonNotice.objects.exists()


def test_a_blocked_bot_fails_each_run_and_pauses_the_schedule_after_the_limit_saying_so(
    make_schedule, topic, owner, member, fake_llm, fake_telegram, settings, client
):
    settings.SCHEDULES_PAUSE_AFTER_FAILURES = 2
    # The owner talks to the bot privately: they are told there, not on the dashboard.
    run = scheduled_reply(make_schedule, topic, "Report", fake_llm)
    fake_telegram.fail_next(
        "sendMessage",
        status=403,
        description=BLOCKED,
        when=lambda params: int(params["chat_id"]) == FORUM_ID,
        times=2,
    )
    work_outbox()
    fake_llm.script(replies.text("Report again"))
    second = schedule_run_now(schedule=run.schedule)
    run_turn_of(second)
    work_outbox()
    work_outbox()  # the words to the owner queued by the last failure
    runs = list(run.schedule.runs.order_by("id"))
    assert [r.status for r in runs] == ["failed", "failed"]
    schedule = run.schedule
    schedule.refresh_from_db()
    assert not schedule.enabled
    assert schedule.paused_reason == "paused after 2 failed runs in a row"
    told = [m.text for m in fake_telegram.bot_messages(OWNER_TELEGRAM_ID)]
    assert len(told) == 2
    assert all(f"schedule #{schedule.pk}" in text and "kicked" in text for text in told)
    assert "paused" not in told[0]
    assert "It is paused now, after 2 failed runs in a row" in told[1]
    assert not PersonNotice.objects.exists()
    # Paused: the next slot is not claimed.
    assert dispatch(now=SLOT + timedelta(hours=1, seconds=1)).claimed == 0
    # The group saw nothing; another member was told nothing.
    assert fake_telegram.bot_messages(FORUM_ID) == []
    client.force_login(member)
    assert "schedule #" not in client.get(reverse("chat_list")).content.decode()


def test_the_dashboard_notice_is_the_owners_alone_and_they_can_dismiss_it(owner, member, client):
    notice = PersonNotice.objects.create(
        person=owner, kind="schedule_failed", text="Your schedule #9 in “ops” failed"
    )
    client.force_login(member)
    assert "schedule #9" not in client.get(reverse("chat_list")).content.decode()
    dismiss = reverse("person_notice_dismiss", args=[notice.pk])
    assert client.post(dismiss).status_code == 404  # not theirs
    notice.refresh_from_db()
    assert notice.dismissed_at is None
    client.force_login(owner)
    assert "schedule #9" in client.get(reverse("chat_list")).content.decode()
    assert client.post(dismiss).status_code == 302
    assert "schedule #9" not in client.get(reverse("chat_list")).content.decode()
