import threading
from datetime import UTC, datetime

import pytest
from django.db import close_old_connections, connection

from chats.models import Actor, Chat, ChatKind, ChatMember, Message
from chats.services import IngestError, message_ingest

pytestmark = [pytest.mark.django_db, pytest.mark.storage]


def ingest(**overrides):
    fields = {"channel": "api", "chat_id": "c1", "user_id": "u1", "text": "hello"}
    fields.update(overrides)
    return message_ingest(**fields)


def test_message_is_stored_with_author_token_count_and_activity():
    ts = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    result = ingest(message_id="m1", user_name="Ada", text="hello world", source_ts=ts)
    message = Message.objects.select_related("chat", "actor").get()
    assert result.created and not result.duplicate
    assert message.chat.chat_key == "api:c1" and message.chat.kind == ChatKind.API
    assert message.actor.display_name == "Ada"
    assert message.actor_key == "api:c1:u1"
    assert message.token_count == 2
    assert message.source_ts == ts and message.created_at >= ts
    assert message.chat.last_activity_at == message.created_at


def test_redelivery_returns_the_stored_row_and_changes_nothing():
    first = ingest(message_id="m1", text="original")
    again = ingest(message_id="m1", text="something else")
    assert again.duplicate and again.message.pk == first.message.pk
    assert Message.objects.get().text == "original"


def test_same_message_id_in_two_chats_is_two_messages():
    ingest(chat_id="c1", message_id="m1")
    ingest(chat_id="c2", message_id="m1")
    assert Message.objects.count() == 2


def test_three_users_in_one_group_share_one_chat_each_message_with_its_author():
    for user_id, name in [(1, "Ann"), (2, "Bob"), (3, "Cai 蔡")]:
        message_ingest(
            channel="telegram",
            chat_id=-1001,
            chat_kind=ChatKind.GROUP,
            user_id=user_id,
            user_name=name,
            message_id=f"{user_id}",
            text=f"hi from {name}",
        )
    assert Chat.objects.count() == 1
    assert Actor.objects.count() == 3
    authors = [m.actor.display_name for m in Message.objects.select_related("actor")]
    assert authors == ["Ann", "Bob", "Cai 蔡"]
    assert Chat.objects.get().chat_key == "telegram:-1001"


def test_forum_topics_are_separate_chats():
    ingest(channel="telegram", chat_id=-100, thread_id=5, message_id="1")
    ingest(channel="telegram", chat_id=-100, thread_id=6, message_id="1")
    kinds = sorted(Chat.objects.values_list("chat_key", "kind"))
    assert kinds == [("telegram:-100:topic:5", "topic"), ("telegram:-100:topic:6", "topic")]


def test_display_name_follows_the_platform():
    ingest(message_id="1", user_name="Old")
    ingest(message_id="2", user_name="New")
    assert Actor.objects.get().display_name == "New"


def test_linked_person_becomes_a_member(owner):
    ingest(message_id="1", person=owner)
    chat = Chat.objects.get()
    assert ChatMember.objects.filter(chat=chat, person=owner).exists()
    assert Actor.objects.get().person == owner


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"text": "a\x00b"}, "text"),
        ({"text": "\ud800"}, "text"),
        ({"text": 5}, "text"),
        ({"chat_id": "a\nb"}, "chat_id"),
        ({"channel": "Bad Channel"}, "chat_id"),
        ({"user_id": ""}, "user_id"),
        ({"message_id": ""}, "message_id"),
        ({"role": "wizard"}, "role"),
        ({"source_ts": datetime(2026, 1, 1)}, "ts"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_stored(overrides, field):
    with pytest.raises(IngestError) as error:
        ingest(**{"message_id": "m1", **overrides})
    assert error.value.field == field
    assert Message.objects.count() == 0


def test_huge_message_is_stored_whole():
    text = "长" * 50_000 + " end"
    ingest(message_id="big", text=text)
    assert Message.objects.get().text == text


@pytest.mark.django_db(transaction=True)
def test_twenty_simultaneous_deliveries_store_one_row():
    """The race the Telegram redelivery and API retries create; run on SQLite and PostgreSQL."""
    barrier = threading.Barrier(20)
    results, errors = [], []

    def deliver():
        try:
            barrier.wait(timeout=10)
            results.append(ingest(chat_id="race", message_id="same", user_name="Racer"))
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert Message.objects.count() == 1
    assert Chat.objects.count() == 1 and Actor.objects.count() == 1
    assert sum(result.created for result in results) == 1
    assert len({result.message.pk for result in results}) == 1


def test_every_stored_message_moves_last_activity_forward_never_back():
    from chats.services import chat_reset, message_append

    first = ingest(message_id="1").message
    chat = Chat.objects.get()
    reply = message_append(chat=chat, role=Message.Role.ASSISTANT, text="hello back")
    chat.refresh_from_db()
    assert chat.last_activity_at == reply.created_at > first.created_at
    marker = chat_reset(chat=chat)
    chat.refresh_from_db()
    assert chat.last_activity_at == marker.created_at
    # A message stored with an older time (an import) does not move the chat back.
    Message.objects.create(
        chat=chat,
        role="user",
        text="old",
        external_id="old",
        created_at=datetime(2020, 1, 1, tzinfo=UTC),
    )
    chat.refresh_from_db()
    assert chat.last_activity_at == marker.created_at
