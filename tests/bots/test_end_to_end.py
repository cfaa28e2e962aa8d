"""The Telegram bridge end to end: the real bot process (python-telegram-bot against a fake
Bot API server speaking real HTTP), a real Celery worker, the fake model server, Redis and
the test database. Every assertion is about what a Telegram user would see."""

import re
import time

import pytest

from bots.models import OutboundMessage, ProcessedUpdate
from chats.models import Chat, Message, Turn
from tests.bots.conftest import FORUM_ID, GROUP_ID
from tests.fakes import openai_server as fake_openai
from tests.fakes.telegram_server import check_html, group_chat, private_chat, tg_user, utf16_len

pytestmark = pytest.mark.timeout(240)

ALICE = tg_user(1001, "Alice", username="alice")
BOB = tg_user(1002, "Bob")
CARA = tg_user(1003, "Cara")
MENTION = "@hermes_test_bot"


def wait(predicate, timeout=30.0, what=""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def replies_done(count: int | None = None):
    """All reply rows delivered (and at least `count` of them)."""

    def check():
        rows = OutboundMessage.objects.filter(kind="reply")
        total = rows.count()
        return (count is None or total >= count) and not rows.exclude(status="delivered").exists()

    return check


def final_text(message) -> str:
    """What the user reads: the visible text of the last version of a bot message."""
    if message.parse_mode == "HTML":
        return check_html(message.text)[1]
    return message.text


def test_private_chat_group_and_forum_topics_map_and_reply_in_place(telegram_live):
    tg, llm = telegram_live.tg, telegram_live.llm
    llm.default = fake_openai.echo("re: ")

    tg.send(private_chat(ALICE), ALICE, "hello from a private chat")
    group = group_chat(GROUP_ID, "Ops")
    tg.send(group, ALICE, "morning all")
    tg.send(group, BOB, "morning")
    asked = tg.send(group, CARA, f"{MENTION} what is on today?")
    forum = group_chat(FORUM_ID, "Eng", forum=True)
    tg.send(forum, ALICE, f"{MENTION} infra question", thread_id=5, topic_name="Infra")
    tg.send(forum, BOB, f"{MENTION} release question", thread_id=9, topic_name="Releases")

    wait(replies_done(4), 60, "four replies")
    dm = tg.bot_messages(1001)
    assert [final_text(m) for m in dm] == ["re: hello from a private chat"]
    in_group = tg.bot_messages(GROUP_ID)
    assert [final_text(m) for m in in_group] == [f"re: [Cara] {MENTION} what is on today?"]
    assert in_group[0].reply_to == asked["message"]["message_id"] and in_group[0].thread_id is None
    infra, releases = tg.bot_messages(FORUM_ID, 5), tg.bot_messages(FORUM_ID, 9)
    assert [final_text(m) for m in infra] == [f"re: [Alice] {MENTION} infra question"]
    assert [final_text(m) for m in releases] == [f"re: [Bob] {MENTION} release question"]
    assert len(tg.bot_messages(FORUM_ID)) == 2  # nothing landed outside its topic
    # Typing indicators went to the topic too.
    typing = [c.params for c in tg.calls_of("sendChatAction") if c.params["chat_id"] == FORUM_ID]
    assert typing and {p.get("message_thread_id") for p in typing} <= {5, 9}

    shared = Chat.objects.get(chat_key=f"telegram:{GROUP_ID}")
    users = shared.messages.filter(role="user").order_by("id")
    assert [(m.actor.display_name, m.actor.external_id) for m in users] == [
        ("Alice", "1001"),
        ("Bob", "1002"),
        ("Cara", "1003"),
    ]
    assert shared.messages.filter(role="assistant").count() == 1
    # The model saw the whole group conversation, each line with its author.
    prompt = next(r for r in llm.requests if "what is on today" in fake_openai.last_user_text(r))
    history = [m["content"] for m in prompt["messages"] if m["role"] == "user"]
    assert history == [
        "[Alice] morning all",
        "[Bob] morning",
        f"[Cara] {MENTION} what is on today?",
    ]
    assert Chat.objects.filter(chat_key__startswith=f"telegram:{FORUM_ID}:topic:").count() == 2
    # Each delivered reply records the Telegram message ids it used.
    for row in OutboundMessage.objects.filter(kind="reply"):
        assert row.message_ids and row.text.startswith("re: ")
