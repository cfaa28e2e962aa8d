"""Where a personal key's conversation lands: once per message in the person's own private
`openai` chat, forks on edits, named chats only where the person may post, never another
member's, a Telegram, terminal or integration chat; the client's note in the prompt."""

import pytest

from chats.agent.registry import TurnContext
from chats.models import Chat, ChatMember, Message, Turn
from chats.selectors import chat_private_to
from chats.services import chat_get_or_create, chat_member_ensure
from memory.audience import chat_audience
from openai_api.models import Conversation
from openai_api.parsing import ConversationRequest
from openai_api.prompt import client_note_section
from openai_api.services import (
    ChatNotAllowed,
    ChatNotFound,
    conversation_post,
    conversation_record_reply,
)

pytestmark = [pytest.mark.django_db, pytest.mark.storage]


def ask(*items, system="", chat_key=None):
    return ConversationRequest(
        items=tuple(items), system=system, chat_key=chat_key, stream=False, include_usage=False
    )


def answer(landed, text):
    """What a worker does: store the reply, then the turn_finished receiver records it."""
    reply = Message.objects.create(
        chat=landed.chat, role="assistant", text=text, external_id=f"reply-{landed.turn.pk}"
    )
    Turn.objects.filter(pk=landed.turn.pk).update(status="completed", reply=reply)
    conversation_record_reply(turn=Turn.objects.get(pk=landed.turn.pk))


def texts(chat):
    return list(
        Message.objects.filter(chat=chat, role__in=["user", "assistant"]).values_list(
            "role", "text"
        )
    )


def test_resending_the_whole_conversation_stores_each_message_once(owner):
    first = conversation_post(person=owner, request=ask(("user", "q1")))
    answer(first, "a1")
    second = conversation_post(
        person=owner, request=ask(("user", "q1"), ("assistant", "a1"), ("user", "q2"))
    )
    assert second.chat == first.chat and second.new
    answer(second, "a2")
    third = conversation_post(
        person=owner,
        request=ask(
            ("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2"), ("user", "q3")
        ),
    )
    assert third.chat == first.chat
    assert texts(first.chat) == [
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2"),
        ("assistant", "a2"),
        ("user", "q3"),
    ]
    assert Turn.objects.filter(chat=first.chat).count() == 3


def test_a_retry_before_the_answer_follows_the_same_turn(owner):
    first = conversation_post(person=owner, request=ask(("user", "q1")))
    again = conversation_post(person=owner, request=ask(("user", "q1")))
    assert (again.chat, again.turn, again.new) == (first.chat, first.turn, False)
    assert Message.objects.count() == 1


def test_an_edit_or_a_regenerate_forks_from_the_common_prefix(owner):
    first = conversation_post(person=owner, request=ask(("user", "q1")))
    answer(first, "a1")
    second = conversation_post(
        person=owner, request=ask(("user", "q1"), ("assistant", "a1"), ("user", "q2"))
    )
    answer(second, "a2")

    edited = conversation_post(
        person=owner, request=ask(("user", "q1"), ("assistant", "a1"), ("user", "q2 edited"))
    )
    assert edited.chat != first.chat
    assert texts(edited.chat) == [("user", "q1"), ("assistant", "a1"), ("user", "q2 edited")]
    assert Conversation.objects.get(chat=edited.chat).forked_from == first.chat

    regenerated = conversation_post(
        person=owner, request=ask(("user", "q1"), ("assistant", "a1"), ("user", "q2"))
    )
    assert regenerated.chat not in (first.chat, edited.chat) and regenerated.new
    assert len(texts(first.chat)) == 4  # the original stays as it was


def test_two_people_with_the_same_conversation_get_their_own_chats(owner, member):
    mine = conversation_post(person=owner, request=ask(("user", "hello")))
    theirs = conversation_post(person=member, request=ask(("user", "hello")))
    assert mine.chat != theirs.chat
    assert list(theirs.chat.memberships.values_list("person", flat=True)) == [member.pk]


def test_the_chat_is_the_persons_own_private_chat(owner):
    landed = conversation_post(person=owner, request=ask(("user", "hello")))
    actor = landed.trigger.actor
    assert (actor.channel, actor.person) == ("openai", owner)
    chat = landed.chat
    assert chat.channel == "openai"
    assert not chat_audience(chat, actor=actor).shared
    assert chat_private_to(chat, actor=actor)
    assert chat_private_to(chat, person=owner)


def test_the_client_note_is_added_to_the_prompt_only_in_its_chat(owner, team_chat):
    landed = conversation_post(
        person=owner, request=ask(("user", "hello"), system="Reply in French.")
    )
    context = TurnContext(chat=landed.chat, trigger=landed.trigger)
    assert "Reply in French." in client_note_section.render(context)
    assert client_note_section.render(TurnContext(chat=team_chat, trigger=landed.trigger)) == ""


def test_named_chats_follow_the_rules(owner, member, outsider):
    room, _ = chat_get_or_create(channel="web", chat_id="ops", kind="room")
    chat_member_ensure(chat=room, person=owner, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=room, person=member)
    members_own = conversation_post(person=member, request=ask(("user", "private")))
    terminal, _ = chat_get_or_create(channel="cli", chat_id="owner-profile", kind="cli")
    chat_member_ensure(chat=terminal, person=owner)
    integration, _ = chat_get_or_create(channel="api", chat_id="ci", kind="api")
    chat_member_ensure(chat=integration, person=owner)
    hello = ("user", "hello")

    # A member posts in the room as themselves.
    landed = conversation_post(person=member, request=ask(hello, chat_key=room.chat_key))
    assert landed.chat == room and landed.trigger.actor.person == member
    # An outsider cannot see the room; nobody sees another member's own openai chat.
    with pytest.raises(ChatNotFound):
        conversation_post(person=outsider, request=ask(hello, chat_key=room.chat_key))
    with pytest.raises(ChatNotFound):
        conversation_post(person=owner, request=ask(hello, chat_key=members_own.chat.chat_key))
    # Even as a member, never a terminal or an integration's chat.
    for chat in (terminal, integration):
        with pytest.raises(ChatNotAllowed):
            conversation_post(person=owner, request=ask(hello, chat_key=chat.chat_key))
    # An openai chat someone was added to is still not theirs to post in through a key.
    chat_member_ensure(chat=members_own.chat, person=owner)
    with pytest.raises(ChatNotAllowed):
        conversation_post(person=owner, request=ask(hello, chat_key=members_own.chat.chat_key))
    assert Message.objects.filter(chat__in=[terminal, integration]).count() == 0
    assert Message.objects.filter(chat=members_own.chat).count() == 1
    assert Chat.objects.filter(channel="openai").count() == 1


def test_a_named_chat_stores_repeated_words_again_but_not_a_retry(owner):
    room, _ = chat_get_or_create(channel="web", chat_id="ops", kind="room")
    chat_member_ensure(chat=room, person=owner)
    first = conversation_post(person=owner, request=ask(("user", "ok"), chat_key=room.chat_key))
    retry = conversation_post(person=owner, request=ask(("user", "ok"), chat_key=room.chat_key))
    assert (retry.trigger, retry.turn, retry.new) == (first.trigger, first.turn, False)

    Turn.objects.filter(pk=first.turn.pk).update(status="completed")
    later = conversation_post(person=owner, request=ask(("user", "ok"), chat_key=room.chat_key))
    assert later.trigger != first.trigger and later.new
    assert Message.objects.filter(chat=room, text="ok").count() == 2


def test_another_members_same_words_in_a_named_room_are_not_taken_for_a_retry(owner, member):
    # Regression: the retry check matched the words alone, so a second member sending the
    # same message while the first one's turn ran had nothing stored and followed (and, on
    # disconnect, stopped) the first member's turn.
    room, _ = chat_get_or_create(channel="web", chat_id="ops", kind="room")
    chat_member_ensure(chat=room, person=owner)
    chat_member_ensure(chat=room, person=member)
    first = conversation_post(person=owner, request=ask(("user", "ok"), chat_key=room.chat_key))
    other = conversation_post(person=member, request=ask(("user", "ok"), chat_key=room.chat_key))
    assert other.trigger != first.trigger and other.trigger.actor.person == member
    assert other.turn != first.turn
    assert Message.objects.filter(chat=room, text="ok").count() == 2


def test_the_person_sees_the_conversation_on_the_dashboard_and_others_do_not(owner, outsider):
    from django.test import Client

    landed = conversation_post(
        person=owner, request=ask(("user", "Where are the   release notes kept?"))
    )
    assert landed.chat.title == "Where are the release notes kept?"
    mine, theirs = Client(), Client()
    mine.force_login(owner)
    theirs.force_login(outsider)
    url = f"/chats/{landed.chat.chat_key}/"
    page = mine.get(url)
    assert page.status_code == 200 and "Where are the   release notes kept?" in page.text
    assert theirs.get(url).status_code == 404


def test_a_retry_after_a_failed_turn_answers_again_in_the_same_chat(owner):
    first = conversation_post(person=owner, request=ask(("user", "q1")))
    Turn.objects.filter(pk=first.turn.pk).update(status="failed", error="model down")
    again = conversation_post(person=owner, request=ask(("user", "q1")))
    assert again.chat == first.chat and again.new
    assert again.turn != first.turn and again.turn.trigger == first.trigger
    assert Message.objects.count() == 1


def test_text_before_a_tool_step_is_part_of_the_answer_the_client_resends(owner):
    from openai_api.services import visible_answer

    first = conversation_post(person=owner, request=ask(("user", "what time is it?")))
    Message.objects.create(
        chat=first.chat,
        role="assistant",
        text="Let me check.",
        parts=[{"type": "tool_call", "id": "c1", "name": "current_time", "arguments": "{}"}],
        external_id="step-1",
        metadata={"turn": first.turn.pk},
    )
    answer(first, "It is noon.")
    shown = visible_answer(Turn.objects.get(pk=first.turn.pk), person=owner)
    assert shown == "Let me check.\n\nIt is noon."
    second = conversation_post(
        person=owner,
        request=ask(("user", "what time is it?"), ("assistant", shown), ("user", "thanks")),
    )
    assert second.chat == first.chat


def test_naming_ones_own_openai_chat_continues_it(owner):
    first = conversation_post(person=owner, request=ask(("user", "q1")))
    answer(first, "a1")
    named = conversation_post(
        person=owner, request=ask(("user", "q2"), system="Short.", chat_key=first.chat.chat_key)
    )
    assert named.chat == first.chat and named.new
    assert texts(first.chat) == [("user", "q1"), ("assistant", "a1"), ("user", "q2")]
    assert named.trigger.actor.channel == "openai"
    assert Conversation.objects.get(chat=first.chat).system_note == "Short."


def test_the_answer_is_recorded_before_the_client_gets_it(owner):
    """The client may resend the conversation the moment it has the answer, before the
    worker's `turn_finished` receiver recorded the reply (on PostgreSQL a resend that read
    the prefixes just before that receiver committed then forked a new chat): the endpoint
    records the reply as the conversation's tip first (`answer_of`)."""
    from openai_api.digests import chain
    from openai_api.following import answer_of, outcome

    first = conversation_post(person=owner, request=ask(("user", "q1")))
    reply = Message.objects.create(
        chat=first.chat, role="assistant", text="a1", external_id=f"reply-{first.turn.pk}"
    )
    Turn.objects.filter(pk=first.turn.pk).update(status="completed", reply=reply)
    # No receiver has run: only what the endpoint does before it answers.
    assert answer_of(outcome(first.turn.pk), owner) == "a1"
    conversation = Conversation.objects.get(chat=first.chat)
    assert conversation.tip_digest == chain(
        first.trigger.metadata["openai_digest"], "assistant", "a1"
    )
    second = conversation_post(
        person=owner, request=ask(("user", "q1"), ("assistant", "a1"), ("user", "q2"))
    )
    assert second.chat == first.chat
    assert texts(first.chat) == [("user", "q1"), ("assistant", "a1"), ("user", "q2")]
    # The worker's receiver running afterwards changes nothing.
    conversation_record_reply(turn=Turn.objects.get(pk=first.turn.pk))
    assert (
        Conversation.objects.get(chat=first.chat).tip_digest
        == second.trigger.metadata["openai_digest"]
    )


WAIT = 60  # seconds a thread may wait before the test gives up (a hang, not a measurement)


@pytest.mark.django_db(transaction=True)
def test_the_same_new_conversation_sent_twice_at_once_lands_once(owner, monkeypatch):
    """A client's retry racing its first delivery: both requests reach the point where they
    would create the conversation at the same moment; the second waits for the first, then
    follows its turn, instead of making a second chat or failing on a constraint (a 500).
    On SQLite writers queue at BEGIN IMMEDIATE, so the two meet just before it instead."""
    import threading

    from django.db import close_old_connections, connection

    from openai_api import services
    from openai_api.following import land

    both_there = threading.Barrier(2, timeout=WAIT)
    one_at_a_time = services._one_at_a_time

    def meet_then_lock(person):
        both_there.wait()
        one_at_a_time(person)

    inside = connection.vendor == "postgresql"
    if inside:
        monkeypatch.setattr(services, "_one_at_a_time", meet_then_lock)
    results, errors = [], []

    def send():
        try:
            if not inside:
                both_there.wait()
            results.append(land(owner, ask(("user", "hello twice"))))
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not errors, errors
    (first, _), (second, _) = results
    assert first.chat == second.chat and first.turn == second.turn
    assert sorted([first.new, second.new]) == [False, True]
    assert Conversation.objects.count() == 1
    assert Message.objects.filter(text="hello twice").count() == 1
    assert Turn.objects.count() == 1


def test_a_constraint_refusal_is_a_retryable_409_not_a_500(owner, monkeypatch):
    from django.db import IntegrityError

    from openai_api import following
    from openai_api.errors import OpenAIError

    def refused(**kwargs):
        raise IntegrityError("duplicate key value violates unique constraint")

    monkeypatch.setattr(following, "conversation_post", refused)
    with pytest.raises(OpenAIError) as raised:
        following.land(owner, ask(("user", "q1")))
    error = raised.value
    assert (error.status, error.code, error.headers) == (
        409,
        "conversation_conflict",
        {"Retry-After": "1"},
    )
    assert error.body()["error"]["type"] == "invalid_request_error"
