"""History reads (chats.selectors) and platform edits (chats.services.message_record_edit)."""

import pytest
from django.contrib.auth.models import AnonymousUser

from chats.models import ChatMember, Message, MessageEdit
from chats.search import message_search
from chats.selectors import (
    chat_for_person,
    chat_history,
    chat_may_post,
    chat_messages_page,
    chat_role,
    chat_still_readable,
    chats_readable_by,
)
from chats.services import chat_reset, message_ingest, message_record_edit

pytestmark = [pytest.mark.django_db, pytest.mark.storage]


def say(text, *, chat_id="team-room", user="u-olivia", **extra):
    return message_ingest(channel="web", chat_id=chat_id, user_id=user, text=text, **extra).message


def ids(messages):
    return [m.pk for m in messages]


# --- chat_history -------------------------------------------------------------------------


def test_history_without_reset_is_everything_in_order(team_chat):
    stored = [say(f"message {i}") for i in range(4)]
    assert ids(chat_history(team_chat)) == ids(stored)


def test_history_starts_after_the_last_reset_marker(team_chat):
    before = [say("before 1"), say("before 2")]
    first_reset = chat_reset(chat=team_chat)
    middle = say("between resets")
    last_reset = chat_reset(chat=team_chat)
    after = [say("after 1"), say("after 2", user="u-marco")]

    assert ids(chat_history(team_chat)) == ids(after)
    assert ids(chat_history(team_chat, since_reset=False)) == [
        *ids(before),
        first_reset.pk,
        middle.pk,
        last_reset.pk,
        *ids(after),
    ]
    assert last_reset.is_reset_marker


def test_history_right_after_a_reset_is_empty_and_other_chats_are_untouched(team_chat):
    say("old context")
    other = say("another chat keeps its history", chat_id="other-room")
    chat_reset(chat=team_chat)
    assert list(chat_history(team_chat)) == []
    assert ids(chat_history(other.chat)) == [other.pk]


def test_history_ignores_markers_that_are_not_resets(team_chat):
    first = say("first")
    note = say("a marker of another kind", role=Message.Role.MARKER, metadata={"marker": "note"})
    second = say("second")
    assert ids(chat_history(team_chat)) == [first.pk, note.pk, second.pk]


# --- chat_messages_page -----------------------------------------------------------------


@pytest.fixture
def ten_messages(team_chat):
    return [say(f"message {i}") for i in range(10)]


def test_page_without_cursor_is_the_newest_in_ascending_order(ten_messages, team_chat):
    assert ids(chat_messages_page(team_chat, limit=3)) == ids(ten_messages[7:])
    assert ids(chat_messages_page(team_chat)) == ids(ten_messages)


def test_page_before_scrolls_back(ten_messages, team_chat):
    page = chat_messages_page(team_chat, before=ten_messages[5].pk, limit=3)
    assert ids(page) == ids(ten_messages[2:5])
    assert ids(chat_messages_page(team_chat, before=ten_messages[1].pk, limit=3)) == [
        ten_messages[0].pk
    ]
    assert chat_messages_page(team_chat, before=ten_messages[0].pk) == []


def test_page_after_catches_up(ten_messages, team_chat):
    page = chat_messages_page(team_chat, after=ten_messages[5].pk, limit=3)
    assert ids(page) == ids(ten_messages[6:9])
    assert chat_messages_page(team_chat, after=ten_messages[-1].pk) == []


def test_page_between_after_and_before_keeps_the_newest(ten_messages, team_chat):
    page = chat_messages_page(
        team_chat, after=ten_messages[1].pk, before=ten_messages[8].pk, limit=3
    )
    assert ids(page) == ids(ten_messages[5:8])


def test_page_includes_markers_and_stays_inside_the_chat(ten_messages, team_chat):
    marker = chat_reset(chat=team_chat)
    say("elsewhere", chat_id="other-room")
    page = chat_messages_page(team_chat, limit=2)
    assert ids(page) == [ten_messages[-1].pk, marker.pk]


# --- chats_readable_by, chat_for_person, chat_role ----------------------------------------


def test_members_read_their_chats_and_outsiders_never_do(team_chat, owner, member, outsider):
    say("hello", chat_id="oscar-room", member=outsider)
    assert list(chats_readable_by(owner)) == [team_chat]
    assert list(chats_readable_by(member)) == [team_chat]
    assert team_chat not in chats_readable_by(outsider)
    assert [chat.chat_key for chat in chats_readable_by(outsider)] == ["web:oscar-room"]


def test_anonymous_missing_and_inactive_people_read_nothing(team_chat, member):
    assert list(chats_readable_by(AnonymousUser())) == []
    assert list(chats_readable_by(None)) == []
    member.is_active = False
    member.save(update_fields=["is_active"])
    assert list(chats_readable_by(member)) == []


def test_readable_chats_newest_activity_first(team_chat, owner):
    say("older room", chat_id="older-room", member=owner)
    say("team room is newer")
    keys = [chat.chat_key for chat in chats_readable_by(owner)]
    assert keys == ["web:team-room", "web:older-room"]


def test_chat_for_person(team_chat, owner, member, outsider):
    assert chat_for_person(owner, team_chat.chat_key) == team_chat
    assert chat_for_person(member, team_chat.chat_key) == team_chat
    assert chat_for_person(outsider, team_chat.chat_key) is None
    assert chat_for_person(AnonymousUser(), team_chat.chat_key) is None
    assert chat_for_person(owner, "web:no-such-room") is None


def test_chat_role(team_chat, owner, member, outsider):
    assert chat_role(owner, team_chat) == ChatMember.Role.OWNER
    assert chat_role(member, team_chat) == ChatMember.Role.MEMBER
    assert chat_role(outsider, team_chat) is None
    assert chat_role(AnonymousUser(), team_chat) is None


# --- message_record_edit ------------------------------------------------------------------


def test_edit_updates_the_row_and_keeps_before_and_after(team_chat, owner):
    message = say("deploy the old banana build")
    original_tokens = message.token_count

    edit = message_record_edit(message=message, text="ship the new cherry release today please")

    assert edit is not None
    assert edit.previous_text == "deploy the old banana build"
    assert edit.new_text == "ship the new cherry release today please"
    stored = Message.objects.get(pk=message.pk)
    assert stored.text == "ship the new cherry release today please"
    assert stored.edited_at == edit.recorded_at
    assert stored.token_count != original_tokens
    assert message.text == stored.text  # the caller's instance is refreshed


def test_repeated_identical_edit_records_nothing(team_chat):
    message = say("first text")
    assert message_record_edit(message=message, text="second text") is not None
    assert message_record_edit(message=message, text="second text") is None
    assert MessageEdit.objects.filter(message=message).count() == 1
    # Changing the parts alone is an edit too.
    assert message_record_edit(message=message, text="second text", parts=[{"x": 1}]) is not None
    assert MessageEdit.objects.filter(message=message).count() == 2


def test_search_follows_edits(team_chat, owner):
    message = say("deploy the old banana build 旧版本")
    say("an unrelated message")
    assert [hit.message.pk for hit in message_search(person=owner, query="banana")] == [message.pk]

    message_record_edit(message=message, text="ship the new cherry release 新版本")

    for query in ("cherry", "CHERRY release", "新版本", "新版"):
        assert [hit.message.pk for hit in message_search(person=owner, query=query)] == [
            message.pk
        ], query
    for query in ("banana", "deploy", "旧版本", "旧版", "old"):
        assert message_search(person=owner, query=query) == [], query
    [hit] = message_search(person=owner, query="cherry")
    assert hit.snippet == "ship the new cherry release 新版本"


def test_chat_still_readable_reads_membership_and_activity_as_stored_now(
    team_chat, owner, member, outsider
):
    assert chat_still_readable(member.pk, team_chat.pk)
    assert not chat_still_readable(outsider.pk, team_chat.pk)
    ChatMember.objects.filter(chat=team_chat, person=member).delete()
    assert not chat_still_readable(member.pk, team_chat.pk)
    owner.is_active = False
    owner.save(update_fields=["is_active"])
    assert not chat_still_readable(owner.pk, team_chat.pk)


# --- chat_may_post: the one rule of every door that posts ----------------------------------


@pytest.fixture
def conversation(owner, member):
    """Olivia's `/v1` conversation, with Marco added to read it."""
    from chats.services import chat_get_or_create, chat_member_ensure

    chat, _ = chat_get_or_create(channel="openai", chat_id="olivia-conv", kind="api")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=member)
    return chat


def test_chat_may_post_needs_an_active_member_and_the_owner_of_a_v1_conversation(
    team_chat, conversation, owner, member, outsider
):
    assert chat_may_post(member, team_chat) and chat_may_post(owner, conversation)
    refused = chat_may_post(member, conversation)
    assert not refused and "only its owner speaks" in refused.reason
    assert not chat_may_post(outsider, team_chat) and not chat_may_post(AnonymousUser(), team_chat)
    member.is_active = False
    member.save()
    assert not chat_may_post(member, team_chat)


def test_every_door_refuses_a_read_only_member_of_a_v1_conversation(conversation, owner, member):
    from openai_api.parsing import ConversationRequest
    from openai_api.services import ChatNotAllowed, conversation_post

    request = ConversationRequest(
        items=(("user", "say I resign"),),
        system="",
        chat_key=conversation.chat_key,
        stream=False,
        include_usage=False,
    )
    with pytest.raises(ChatNotAllowed):
        conversation_post(person=member, request=request)
    assert not Message.objects.filter(chat=conversation).exists()


def test_another_integration_cannot_post_into_an_api_chat_it_was_not_given(owner, member, api_for):
    mine = api_for(owner).post(
        "/api/v1/messages",
        {"chat_id": "ops", "user_id": "bot", "message_id": "m1", "text": "hello"},
    )
    assert mine.status_code == 201
    theirs = api_for(member).post(
        "/api/v1/messages",
        {"chat_id": "ops", "user_id": "bot", "message_id": "m2", "text": "I resign"},
    )
    assert theirs.status_code == 403 and theirs.json()["error"]["code"] == "not_a_member"
    assert Message.objects.filter(text="I resign").count() == 0


# --- chat_private_to: the one home of "private" -------------------------------------------


def _private_everywhere(chat, person) -> dict[str, bool]:
    """What memory, skills, tools and schedules each conclude for `person` in `chat`."""
    from memory.audience import chat_audience
    from schedules.proposals import schedule_create_by_agent
    from skills.scope import private_owner
    from toolservers.policy import may_decide

    schedule = schedule_create_by_agent(
        owner=person, chat=chat, prompt="Ping me", kind="cron", cron="0 9 * * *"
    )
    verdicts = {
        "memory": not chat_audience(chat, person=person).shared,
        "skills": private_owner(chat, person=person) is not None,
        "tools": may_decide(chat, person),
        "schedules": schedule.approval == "approved",
    }
    schedule.delete()
    return verdicts


@pytest.mark.parametrize("channel, kind", [("telegram", "dm"), ("openai", "api"), ("cli", "cli")])
def test_a_private_chat_stops_being_private_for_everyone_once_a_member_is_added(
    owner, member, channel, kind
):
    from chats.selectors import chat_private_to
    from chats.services import chat_member_ensure

    chat = message_ingest(
        channel=channel,
        chat_id="55",  # a Telegram DM's id is its user's
        chat_kind=kind,
        user_id="55",
        text="hi",
        person=owner,
        member=owner,
    ).chat
    if channel == "openai":  # her own conversation: she owns it (and decides its tools)
        ChatMember.objects.filter(chat=chat, person=owner).update(role=ChatMember.Role.OWNER)
    assert chat_private_to(chat, person=owner)
    before = _private_everywhere(chat, owner)
    assert set(before.values()) == {True}
    chat_member_ensure(chat=chat, person=member)
    assert not chat_private_to(chat, person=owner)
    after = _private_everywhere(chat, owner)
    if channel == "openai":
        del after["tools"]  # an owner decides her chat's tools, private or not
    assert set(after.values()) == {False}


def test_groups_and_rooms_are_never_private_and_unlinked_authors_only_alone(team_chat, owner):
    from chats.models import Actor
    from chats.selectors import chat_private_to

    assert not chat_private_to(team_chat, person=owner)
    ChatMember.objects.filter(chat=team_chat).exclude(person=owner).delete()
    assert not chat_private_to(team_chat, person=owner)  # a room's later members read it
    dm = message_ingest(
        channel="telegram", chat_id="55", chat_kind="dm", user_id="55", text="hi"
    ).message
    actor = Actor.objects.get(pk=dm.actor_id)
    assert chat_private_to(dm.chat, actor=actor)
    assert not chat_private_to(dm.chat)  # nobody known: never private
