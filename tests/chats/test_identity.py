"""Identity: every person speaks only as themselves (issue #11, items 1-3 and web actors).

The API writes only to the `api` channel and its users live in the token owner's namespace;
only a channel's own adapter creates that channel's chats and decides their kind; web and
terminal actors are keyed by Person id, so a reused username inherits nothing.
"""

import io

import pytest
from django.core.management import call_command

from chats.models import Actor, Chat, ChatKind, ChatMember, Message
from chats.services import (
    actor_get_or_create,
    chat_get_or_create,
    chat_member_ensure,
    message_ingest,
    person_actor_id,
)
from tests.fakes import openai_server as fake_openai

pytestmark = [pytest.mark.django_db, pytest.mark.storage]

MESSAGES = "/api/v1/messages"


def post(api, **fields):
    payload = {"chat_id": "c1", "user_id": "u1", "message_id": "m1", "text": "hello there"}
    payload.update(fields)
    return api.post(MESSAGES, payload)


def actor_for_person(*, channel, person):
    """The actor a dashboard person speaks as on web or the terminal, as the adapters key it."""
    return actor_get_or_create(
        channel=channel,
        user_id=person_actor_id(person),
        display_name=person.username,
        person=person,
    )


def counts():
    return (
        Chat.objects.count(),
        Message.objects.count(),
        Actor.objects.count(),
        ChatMember.objects.count(),
    )


def web_room_with(*people):
    chat, _ = chat_get_or_create(channel="web", chat_id="room-1", title="Room")
    for person in people:
        chat_member_ensure(chat=chat, person=person)
    return chat


def say_on_web(person, chat, text, message_id):
    actor = actor_for_person(channel="web", person=person)
    return message_ingest(
        channel="web",
        chat_id=chat.external_id,
        user_id=actor.external_id,
        user_name=person.get_username(),
        person=person,
        text=text,
        message_id=message_id,
    )


# --- 1. impersonation through the API ---------------------------------------------------


@pytest.mark.parametrize("channel", ["web", "telegram", "cli"])
def test_the_api_cannot_post_as_a_person_of_another_channel(owner, outsider, api_for, channel):
    room = web_room_with(owner)
    say_on_web(owner, room, "hi", "w-1")
    telegram_actor = Actor.objects.create(
        channel="telegram", external_id="4242", display_name="Olivia", person=owner
    )
    web_actor = actor_for_person(channel="web", person=owner)
    user_id = {"web": web_actor.external_id, "telegram": "4242", "cli": owner.get_username()}[
        channel
    ]
    before = counts()

    response = post(
        api_for(outsider),
        channel=channel,
        chat_id="room-1" if channel == "web" else "new-chat",
        user_id=user_id,
        user_name="Not Olivia",
    )

    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "channel_not_allowed"
    assert "api" in error["message"]
    assert counts() == before
    telegram_actor.refresh_from_db()
    web_actor.refresh_from_db()
    assert (telegram_actor.display_name, web_actor.display_name) == ("Olivia", "olivia")
    assert not ChatMember.objects.filter(person=outsider).exists()


def test_an_api_user_id_equal_to_a_username_is_not_that_person(owner, outsider, api_for):
    response = post(api_for(outsider), user_id=owner.get_username(), user_name="Olivia")

    assert response.status_code == 201
    message = Message.objects.select_related("actor").get()
    assert message.actor.person_id is None
    assert message.actor.channel == "api"
    assert response.json()["message"]["author"] == {"user_id": "olivia", "name": "Olivia"}
    chat = Chat.objects.get()
    assert list(chat.memberships.values_list("person_id", "role")) == [
        (outsider.pk, ChatMember.Role.OWNER)
    ]


# --- 2. claiming other channels' chats ------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"channel": "telegram", "chat_id": "-100123", "chat_kind": "dm"},
        {"channel": "telegram", "chat_id": "-100123", "thread_id": "7"},
        {"channel": "cli", "chat_id": "default"},
        {"channel": "web", "chat_id": "not-yet-a-room"},
    ],
)
def test_the_api_cannot_create_another_channels_chat(owner, api_for, fields):
    response = post(api_for(owner), **fields)

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "channel_not_allowed"
    assert counts() == (0, 0, 0, 0)


def test_a_telegram_group_arriving_later_is_created_by_its_adapter(owner, api_for):
    post(api_for(owner), channel="telegram", chat_id="-100123", chat_kind="dm")

    chat, created = chat_get_or_create(channel="telegram", chat_id="-100123", kind="group")

    assert created
    assert chat.kind == ChatKind.GROUP
    assert not chat.memberships.exists()


@pytest.mark.parametrize("kind", ["dm", "room", "cli"])
def test_the_api_decides_only_api_chat_kinds(owner, api_for, kind):
    response = post(api_for(owner), chat_kind=kind)

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "chat_kind"
    assert counts() == (0, 0, 0, 0)


def test_an_api_chats_kind_is_fixed_when_it_is_created(owner, api_for):
    api = api_for(owner)
    assert post(api, chat_kind="group").status_code == 201

    response = post(api, chat_kind="api", message_id="m2")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "chat_kind_conflict"
    assert Chat.objects.get().kind == ChatKind.GROUP
    assert Message.objects.count() == 1


# --- 3. one namespace per integration -----------------------------------------------------


def test_api_users_are_namespaced_per_token_owner(owner, member, api_for):
    first = post(api_for(owner), chat_id="alpha", user_name="U One of Olivia")
    second = post(api_for(member), chat_id="beta", user_name="U One of Marco")

    assert first.status_code == second.status_code == 201
    actors = {m.chat.external_id: m.actor for m in Message.objects.select_related("actor", "chat")}
    assert actors["alpha"].pk != actors["beta"].pk
    assert actors["alpha"].display_name == "U One of Olivia"
    assert actors["beta"].display_name == "U One of Marco"
    # The same person's second token speaks for the same integration users.
    third = post(api_for(owner), chat_id="alpha", message_id="m2")
    assert Message.objects.get(pk=third.json()["message"]["id"]).actor_id == actors["alpha"].pk


# --- web and terminal actors are keyed by Person id ---------------------------------------


def test_a_reused_username_does_not_inherit_the_old_persons_actor(make_person):
    alice = make_person("alice")
    room = web_room_with(alice)
    first = say_on_web(alice, room, "I am Alice", "w-1").message
    alice.username = "alicia"
    alice.save()
    newcomer = make_person("alice")
    chat_member_ensure(chat=room, person=newcomer)

    second = say_on_web(newcomer, room, "I am the new alice", "w-2").message

    assert first.actor.person_id == alice.pk
    assert second.actor_id != first.actor_id
    assert second.actor.person_id == newcomer.pk
    # Alice under her new name keeps her actor.
    third = say_on_web(alice, room, "still me", "w-3").message
    assert third.actor_id == first.actor_id


def test_the_web_composer_keys_the_author_by_person_id(owner, client):
    room = web_room_with(owner)
    client.force_login(owner)

    response = client.post(f"/chats/{room.chat_key}/messages", {"text": "hello"})

    assert response.status_code == 302
    actor = Message.objects.get().actor
    assert (actor.channel, actor.external_id, actor.person_id) == ("web", str(owner.pk), owner.pk)


@pytest.mark.django_db(transaction=True)
def test_the_terminal_keys_a_dashboard_user_by_person_id(owner, fake_llm):
    fake_llm.script(fake_openai.text("Hi."))
    call_command(
        "chat",
        "--user",
        owner.get_username(),
        "-m",
        "hello from the terminal",
        stdout=io.StringIO(),
    )

    actor = Message.objects.filter(role="user").get().actor
    assert (actor.channel, actor.external_id, actor.person_id) == ("cli", str(owner.pk), owner.pk)


@pytest.mark.django_db(transaction=True)
def test_a_terminal_login_without_a_user_never_poses_as_a_person(owner, fake_llm, monkeypatch):
    fake_llm.script(fake_openai.text("You are a terminal user."))
    monkeypatch.setattr("getpass.getuser", lambda: str(owner.pk))
    actor_for_person(channel="cli", person=owner)

    call_command("chat", "-m", "who am I?", stdout=io.StringIO())

    actor = Message.objects.filter(role="user").get().actor
    assert actor.person_id is None
    assert actor.namespace == "os"


def test_the_migration_keys_web_and_terminal_people_by_id_and_retires_the_rest(make_person):
    from importlib import import_module

    from django.apps import apps

    migration = import_module("chats.migrations.0006_actor_namespace")
    alice, bob = make_person("alice"), make_person("bob")

    def old_actor(channel, external_id, person):
        return Actor.objects.create(
            channel=channel, external_id=external_id, display_name=external_id, person=person
        )

    alice_web = old_actor("web", "alice", alice)
    alice_renamed = old_actor("web", "alice-new-name", alice)  # a second actor after a rename
    orphan = old_actor("web", str(bob.pk), None)  # a deleted person whose username was digits
    bob_cli = old_actor("cli", "bob", bob)
    os_login = old_actor("cli", "root", None)
    telegram = old_actor("telegram", "4242", alice)

    migration.key_people_by_id(apps, None)

    def key(actor):
        actor.refresh_from_db()
        return (actor.namespace, actor.external_id)

    assert key(alice_web) == ("", str(alice.pk))
    assert key(alice_renamed) == ("retired", "alice-new-name")
    assert key(orphan) == ("retired", str(bob.pk))
    assert key(bob_cli) == ("", str(bob.pk))
    assert key(os_login) == ("os", "root")
    assert key(telegram) == ("", "4242")
    # Bob on the web now gets a new actor of his own, not the orphan's.
    assert actor_for_person(channel="web", person=bob).pk not in {orphan.pk}
