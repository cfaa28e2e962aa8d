"""Memory approvals by inline buttons, at the service level: who gets the buttons, and a
press decides only when the presser is entitled (the review service checks it)."""

import pytest

from bots.models import OutboundMessage
from chats.models import Channel
from chats.services import actor_get_or_create, actor_link
from memory.models import MemoryEntry, MemoryEvent
from memory.services import Author, memory_book, memory_propose
from tests.bots.conftest import GROUP_ID, process
from tests.fakes.telegram_server import BotMessage, FakeTelegram, group_chat, tg_user

pytestmark = [pytest.mark.storage, pytest.mark.django_db(transaction=True)]

ALICE = tg_user(1001, "Alice")
BOB = tg_user(1002, "Bob")


@pytest.fixture(autouse=True)
def telegram(settings):
    settings.TELEGRAM_BOT_TOKEN = "7654321:TEST"
    settings.TELEGRAM_ALLOWED_USERS = ["1001", "1002"]


def telegram_actor(user):
    return actor_get_or_create(
        channel=Channel.TELEGRAM, user_id=user["id"], display_name=user["first_name"]
    )


def prompt_of(row: OutboundMessage) -> BotMessage:
    return BotMessage(
        chat_id=row.telegram_chat_id,
        message_id=900,
        text=row.payload["text"],
        parse_mode="HTML",
        thread_id=None,
        reply_to=None,
        reply_markup=row.payload["reply_markup"],
        sent_at=0,
    )


BUILDER = FakeTelegram()  # not started: it builds updates with fresh update ids


def press(user, row, data, chat=None):
    message = prompt_of(row)
    if chat is not None:  # the button's message as seen in another chat (a group, say)
        BUILDER._chats[chat["id"]] = chat
        message.chat_id = chat["id"]
    return process(BUILDER.press(user, message, data))


def test_a_proposal_about_a_telegram_user_asks_them_and_only_their_press_counts():
    alice = telegram_actor(ALICE)
    outcome = memory_propose(
        book=memory_book(scope="user", actor=alice),
        change="add",
        author=Author(actor=alice),
        content="Alice prefers tea over coffee",
    )
    assert outcome.code == "pending"
    row = OutboundMessage.objects.get(kind="send")
    assert row.telegram_chat_id == 1001 and "prefers tea" in row.payload["text"]
    buttons = row.payload["reply_markup"]["inline_keyboard"][0]
    assert [b["callback_data"] for b in buttons] == [
        f"mem:{outcome.entry.pk}:1:a",
        f"mem:{outcome.entry.pk}:1:r",
    ]

    telegram_actor(BOB)  # with the data of Alice's button, in his own private chat
    bob_chat = {"id": BOB["id"], "type": "private", "first_name": "Bob"}
    refused = press(BOB, row, buttons[0]["callback_data"], chat=bob_chat)
    assert refused.result == "memory:not allowed"
    assert MemoryEntry.objects.get(pk=outcome.entry.pk).status == "pending"
    assert [r.kind for r in refused.outbound] == ["answer"]  # the message stays as it is

    approved = press(ALICE, row, buttons[0]["callback_data"])
    assert approved.result == "memory:approve"
    assert MemoryEntry.objects.get(pk=outcome.entry.pk).status == "active"
    edit = next(r for r in approved.outbound if r.kind == "edit")
    assert "Approved by Alice" in edit.payload["text"] and "reply_markup" not in edit.payload
    again = press(ALICE, row, buttons[1]["callback_data"])
    assert again.result == "memory:conflict"


def test_a_press_in_a_group_decides_nothing_even_by_the_person_it_is_about():
    """The rule of skill buttons: a press counts only in the presser's own private chat (a
    forwarded message, or buttons posted in a group, decide nothing)."""
    alice = telegram_actor(ALICE)
    entry = memory_propose(
        book=memory_book(scope="user", actor=alice),
        change="add",
        author=Author(actor=alice),
        content="Alice prefers tea over coffee",
    ).entry
    row = OutboundMessage.objects.get(kind="send")
    approve = row.payload["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    events = MemoryEvent.objects.count()
    group = group_chat(GROUP_ID, "Ops")
    outcome = press(ALICE, row, approve, chat=group)
    assert outcome.result == "memory:not private"
    [answer] = outcome.outbound  # an answer to the presser; the message is not edited
    assert answer.kind == "answer" and answer.telegram_chat_id == GROUP_ID
    assert answer.payload["text"] == "Memory proposals are decided in your private chat with me."
    assert MemoryEntry.objects.get(pk=entry.pk).status == "pending"
    assert MemoryEvent.objects.count() == events
    # In someone else's private chat neither (the chat is not the presser's).
    bob_chat = {"id": BOB["id"], "type": "private", "first_name": "Bob"}
    assert press(ALICE, row, approve, chat=bob_chat).result == "memory:not private"
    assert press(ALICE, row, approve).result == "memory:approve"  # her own private chat


def test_a_team_proposal_goes_to_staff_who_linked_telegram(make_person):
    staff = make_person("sam", is_staff=True)
    bob = telegram_actor(BOB)
    actor_link(actor=bob, person=staff)
    alice = telegram_actor(ALICE)
    outcome = memory_propose(
        book=memory_book(scope="team"),
        change="add",
        author=Author(actor=alice),
        content="Deploys happen on Tuesdays",
    )
    row = OutboundMessage.objects.get(kind="send")
    assert row.telegram_chat_id == 1002
    data = row.payload["reply_markup"]["inline_keyboard"][0][1]["callback_data"]
    alice_chat = {"id": ALICE["id"], "type": "private", "first_name": "Alice"}
    assert press(ALICE, row, data, chat=alice_chat).result == "memory:not allowed"
    assert press(BOB, row, data).result == "memory:reject"
    assert MemoryEntry.objects.get(pk=outcome.entry.pk).status == "rejected"


def test_unknown_or_forged_button_data_decides_nothing():
    alice = telegram_actor(ALICE)
    entry = memory_propose(
        book=memory_book(scope="user", actor=alice),
        change="add",
        author=Author(actor=alice),
        content="Alice prefers tea over coffee",
    ).entry
    row = OutboundMessage(
        telegram_chat_id=1001,
        payload={"text": "x", "reply_markup": {"inline_keyboard": []}},
    )
    assert press(ALICE, row, "mem:abc:1:a").result == "callback:unknown"
    assert press(ALICE, row, "mem:999999:1:a").result == "memory:not allowed"
    # A button of the version before revisions (no revision in it) decides nothing either.
    assert press(ALICE, row, f"mem:{entry.pk}:a").result == "callback:unknown"
    assert press(ALICE, row, f"mem:{entry.pk}:7:a").result == "memory:stale"
    assert MemoryEntry.objects.get(pk=entry.pk).status == "pending"


def test_a_button_shown_for_an_older_version_of_the_proposal_decides_nothing():
    alice = telegram_actor(ALICE)
    author = Author(actor=alice)
    book = memory_book(scope="user", actor=alice)
    outcome = memory_propose(book=book, change="add", author=author, content="Likes tea")
    first = OutboundMessage.objects.get(kind="send")
    approve = first.payload["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    revised = memory_propose(
        book=book, change="replace", author=author, match="tea", content="Likes tea; admin on prod"
    )
    assert revised.code == "pending"

    stale = press(ALICE, first, approve)
    assert stale.result == "memory:stale"
    answer = next(r for r in stale.outbound if r.kind == "answer")
    assert "changed after you saw it" in answer.payload["text"]
    entry = MemoryEntry.objects.get(pk=outcome.entry.pk)
    assert (entry.status, entry.text) == ("pending", "Likes tea; admin on prod")

    # The new version came with its own buttons, which do decide.
    latest = OutboundMessage.objects.filter(kind="send").order_by("-id").first()
    assert latest.pk != first.pk and "admin on prod" in latest.payload["text"]
    data = latest.payload["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    assert len(data.encode()) <= 64
    assert press(ALICE, latest, data).result == "memory:approve"
    assert MemoryEntry.objects.get(pk=outcome.entry.pk).status == "active"
