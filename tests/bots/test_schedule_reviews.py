"""Schedule approvals by inline buttons: a schedule the agent proposed in a group is sent to
the Telegram accounts of that group's admins only; a press decides only as an admin of that
chat, only in the presser's own private chat, and only once."""

import pytest

from bots.models import OutboundMessage
from chats.models import Channel, ChatKind, ChatMember
from chats.services import actor_get_or_create, actor_link, message_ingest
from schedules.models import Schedule
from schedules.proposals import schedule_create_by_agent
from tests.bots.conftest import GROUP_ID, process
from tests.fakes.telegram_server import BotMessage, FakeTelegram, group_chat, tg_user

pytestmark = [pytest.mark.storage, pytest.mark.django_db(transaction=True)]

OLIVIA = tg_user(1001, "Olivia")  # the group's admin
MARCO = tg_user(1002, "Marco")  # a member, who asked for the schedule
OSCAR = tg_user(1003, "Oscar")  # linked, but not in the group
BUILDER = FakeTelegram()  # not started: it builds updates with fresh update ids


@pytest.fixture(autouse=True)
def telegram(settings):
    # Running: a schedule's owner must still be in the group, as getChatMember says.
    with FakeTelegram() as tg:
        tg.configure(settings)
        settings.TELEGRAM_ALLOWED_USERS = ["1001", "1002", "1003"]
        yield tg


@pytest.fixture
def group(owner, member, outsider):
    for user, person in ((OLIVIA, owner), (MARCO, member)):
        message_ingest(
            channel=Channel.TELEGRAM,
            chat_id=GROUP_ID,
            user_id=user["id"],
            user_name=user["first_name"],
            chat_kind=ChatKind.GROUP,
            text="hi",
            person=person,
            member=person,
        )
    oscar = actor_get_or_create(channel=Channel.TELEGRAM, user_id=OSCAR["id"], display_name="Oscar")
    actor_link(actor=oscar, person=outsider)
    chat = ChatMember.objects.get(person=owner).chat
    ChatMember.objects.filter(chat=chat, person=owner).update(role=ChatMember.Role.ADMIN)
    return chat


def press(user, row, data, chat=None):
    message = BotMessage(
        chat_id=row.telegram_chat_id,
        message_id=900,
        text=row.payload["text"],
        parse_mode="HTML",
        thread_id=None,
        reply_to=None,
        reply_markup=row.payload["reply_markup"],
        sent_at=0,
    )
    if chat is not None:  # the button's message as seen in another chat
        BUILDER._chats[chat["id"]] = chat
        message.chat_id = chat["id"]
    return process(BUILDER.press(user, message, data))


def private(user):
    return {"id": user["id"], "type": "private", "first_name": user["first_name"]}


def test_the_groups_admins_get_buttons_and_only_an_admins_press_decides(member, group):
    schedule = schedule_create_by_agent(
        owner=member,
        chat=group,
        prompt="Post the <open> incidents",
        kind="interval",
        interval_minutes=60,
    )
    [row] = OutboundMessage.objects.filter(kind="send")
    assert row.telegram_chat_id == OLIVIA["id"]  # not Marco, not Oscar
    assert "marco asked me to run this" in row.payload["text"]
    assert "Post the &lt;open&gt; incidents" in row.payload["text"]
    buttons = row.payload["reply_markup"]["inline_keyboard"][0]
    approve, reject = (button["callback_data"] for button in buttons)
    assert (approve, reject) == (f"sch:{schedule.pk}:a", f"sch:{schedule.pk}:r")

    # The proposer and an outsider, each in their own private chat with the data.
    assert press(MARCO, row, approve, chat=private(MARCO)).result == "schedule:not allowed"
    assert press(OSCAR, row, approve, chat=private(OSCAR)).result == "schedule:not allowed"
    # The admin, in a group: nothing.
    assert press(OLIVIA, row, approve, chat=group_chat(GROUP_ID, "Ops")).result == (
        "schedule:not private"
    )
    assert Schedule.objects.get(pk=schedule.pk).approval == Schedule.Approval.PENDING

    approved = press(OLIVIA, row, approve)
    assert approved.result == "schedule:approve"
    assert Schedule.objects.get(pk=schedule.pk).enabled
    edit = next(r for r in approved.outbound if r.kind == "edit")
    assert "Approved by Olivia" in edit.payload["text"] and "reply_markup" not in edit.payload
    again = press(OLIVIA, row, reject)
    assert again.result == "schedule:decided"
    assert Schedule.objects.get(pk=schedule.pk).approval == Schedule.Approval.APPROVED


def test_forged_button_data_decides_nothing(member, group):
    schedule = schedule_create_by_agent(
        owner=member, chat=group, prompt="x", kind="interval", interval_minutes=60
    )
    row = OutboundMessage.objects.get(kind="send")
    assert press(OLIVIA, row, f"sch:{schedule.pk}:x").result == "callback:unknown"
    assert press(OLIVIA, row, "sch:99999:a").result == "schedule:not allowed"
    assert Schedule.objects.get(pk=schedule.pk).approval == Schedule.Approval.PENDING


def test_nothing_is_sent_for_a_private_chats_schedule(owner):
    dm = message_ingest(
        channel=Channel.TELEGRAM,
        chat_id=OLIVIA["id"],
        user_id=OLIVIA["id"],
        user_name="Olivia",
        chat_kind=ChatKind.DM,
        text="hi",
        person=owner,
        member=owner,
    ).message.chat
    schedule = schedule_create_by_agent(
        owner=owner, chat=dm, prompt="x", kind="interval", interval_minutes=60
    )
    assert schedule.enabled and not OutboundMessage.objects.filter(kind="send").exists()
