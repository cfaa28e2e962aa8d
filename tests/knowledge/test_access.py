"""The readers rule: nobody reads a passage of a collection they may not read, in any chat,
through any door; only a decider who reads it turns it on; a later joiner who may not read
it is refused while it is on."""

import pytest
from django.core.exceptions import PermissionDenied

from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from knowledge.access import chat_may_use, collections_for_turn, may_turn_on
from knowledge.models import ChatCollection, KnowledgeEvent
from knowledge.selectors import search_for_chat, search_for_person
from knowledge.services import (
    collection_add_readers,
    collection_remove_readers,
    collection_turn_on,
)
from knowledge.signals import MembershipRefused
from tests.knowledge.helpers import runbooks

pytestmark = pytest.mark.django_db

QUESTION = "what to do when the disk is full"


def test_an_outsider_finds_nothing_in_a_collection_they_may_not_read(owner, outsider):
    collection = runbooks(readers=[owner])
    assert search_for_person(owner, QUESTION)[0].section == "On-call runbook › Disk › Full disk"
    assert search_for_person(outsider, QUESTION) == []
    assert search_for_person(outsider, QUESTION, collection=collection) == []
    assert search_for_person(None, QUESTION) == []


def test_an_inactive_reader_reads_nothing(owner):
    runbooks(readers=[owner])
    owner.is_active = False
    owner.save()
    assert search_for_person(owner, QUESTION) == []


def test_only_a_decider_who_reads_it_turns_a_collection_on(owner, member, outsider, team_chat):
    collection = runbooks(readers=[owner, member])
    # A plain member of the chat is no decider, though a reader.
    with pytest.raises(PermissionDenied, match="owner or admin"):
        collection_turn_on(collection=collection, chat=team_chat, by=member)
    # An outsider decides nothing in a chat they are not in.
    with pytest.raises(PermissionDenied):
        collection_turn_on(collection=collection, chat=team_chat, by=outsider)
    collection_turn_on(collection=collection, chat=team_chat, by=owner)
    event = KnowledgeEvent.objects.get(kind=KnowledgeEvent.Kind.ENABLED)
    assert event.by == owner and event.chat == team_chat


def test_a_decider_who_may_not_read_it_cannot_turn_it_on(owner, member, make_person, team_chat):
    collection = runbooks(readers=[member], by=make_person("maintainer"))
    verdict = may_turn_on(owner, team_chat, collection)
    assert not verdict and "may not read" in verdict.reason
    assert not ChatCollection.objects.exists()


def test_a_chat_with_another_group_member_who_is_no_reader_gets_nothing(owner, member, team_chat):
    collection = runbooks(readers=[owner])
    with pytest.raises(PermissionDenied, match="not every member"):
        collection_turn_on(collection=collection, chat=team_chat, by=owner)
    # Even if it were on (the operator forced the row), nothing is read there.
    ChatCollection.objects.create(chat=team_chat, collection=collection, enabled_by=owner)
    assert collections_for_turn(team_chat) == []
    assert search_for_chat(team_chat, QUESTION) == []


def test_a_later_joiner_who_may_not_read_it_is_refused_while_it_is_on(
    owner, member, outsider, team_chat
):
    collection = runbooks(readers=[owner, member], by=owner)
    collection_turn_on(collection=collection, chat=team_chat, by=owner)
    with pytest.raises(MembershipRefused, match="Runbooks"):
        chat_member_ensure(chat=team_chat, person=outsider)
    assert not ChatMember.objects.filter(chat=team_chat, person=outsider).exists()
    # Made a reader, they may join.
    collection_add_readers(collection=collection, people=[outsider], by=owner)
    chat_member_ensure(chat=team_chat, person=outsider)
    assert search_for_chat(team_chat, QUESTION)


def test_a_reader_removed_later_stops_every_use_in_their_chats(owner, member, team_chat):
    collection = runbooks(readers=[owner, member], by=owner)
    collection_turn_on(collection=collection, chat=team_chat, by=owner)
    assert search_for_chat(team_chat, QUESTION)
    collection_remove_readers(collection=collection, people=[member], by=owner)
    assert search_for_chat(team_chat, QUESTION) == []
    assert KnowledgeEvent.objects.filter(kind=KnowledgeEvent.Kind.READERS).count() == 1


def test_an_integrations_api_conversation_never_gets_a_restricted_collection(owner, api_for):
    """The integration's end users read its API conversation: they are nobody's readers."""
    collection = runbooks(readers=[owner])
    message = message_ingest(
        channel="api",
        chat_id="ticket-7",
        user_id="customer-1",
        user_name="Customer",
        text="hello",
        member=owner,
        actor_namespace=f"owner:{owner.pk}",
    ).message
    chat = message.chat
    ChatMember.objects.filter(chat=chat, person=owner).update(role=ChatMember.Role.OWNER)
    verdict = chat_may_use(chat, collection, actor=message.actor)
    assert not verdict and "speaks in this chat" in verdict.reason
    with pytest.raises(PermissionDenied):
        collection_turn_on(collection=collection, chat=chat, by=owner)


def test_a_telegram_group_never_gets_a_restricted_collection(owner):
    collection = runbooks(readers=[owner])
    chat, _ = chat_get_or_create(channel="telegram", chat_id="-100200", kind="group")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    verdict = chat_may_use(chat, collection)
    assert not verdict and "Telegram group" in verdict.reason


def test_a_collection_everyone_may_read_is_used_in_any_chat_it_is_on(owner, member, team_chat):
    collection = runbooks(everyone=True)
    collection_turn_on(collection=collection, chat=team_chat, by=owner)
    assert [c.name for c in collections_for_turn(team_chat)] == ["Runbooks"]
    hits = search_for_chat(team_chat, QUESTION)
    assert hits and hits[0].section.endswith("Full disk")


def test_a_private_dm_of_a_reader_may_use_it(owner, outsider):
    collection = runbooks(readers=[owner])
    message = message_ingest(
        channel="web", chat_id="dm-olivia", user_id=str(owner.pk), user_name="olivia",
        text="hi", member=owner, chat_kind="dm", person=owner,
    ).message  # fmt: skip
    ChatMember.objects.filter(chat=message.chat).update(role=ChatMember.Role.OWNER)
    collection_turn_on(collection=collection, chat=message.chat, by=owner)
    assert search_for_chat(message.chat, QUESTION, actor=message.actor)
    # The same DM with the outsider added (around the guard: the collection was off).
    ChatCollection.objects.all().delete()
    chat_member_ensure(chat=message.chat, person=outsider)
    ChatCollection.objects.create(chat=message.chat, collection=collection)
    assert search_for_chat(message.chat, QUESTION, actor=message.actor) == []
