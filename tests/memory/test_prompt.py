"""The memory block of the system prompt, through the context builder: the cheap "nothing to
show" answer asked on every turn is never stale. What a service writes (a proposal, an
approval, a removal, another chat's or person's entry) counts from the very next context."""

import pytest

from chats.agent.context import build_context
from chats.agent.llm.base import ProviderInfo
from chats.agent.registry import TurnContext
from chats.services import actor_get_or_create, message_ingest
from memory.models import MemoryEntry
from memory.prompt import memory_section
from memory.reviews import memory_review
from memory.selectors import memory_maybe_in_prompt
from memory.services import Author, memory_book, memory_forget, memory_propose
from tests.memory.helpers import shown_revision

pytestmark = [pytest.mark.django_db, pytest.mark.storage]

PROVIDER = ProviderInfo(name="fake", model="fake", context_tokens=32_000, supports_tools=True)
FACT = "Deploys go out from the release branch every Tuesday."


def turn(text, *, chat_id="1", user="10", name="Alice", kind="dm", person=None) -> TurnContext:
    message = message_ingest(
        channel="telegram",
        chat_id=chat_id,
        user_id=user,
        user_name=name,
        text=text,
        chat_kind=kind,
        person=person,
    ).message
    return TurnContext(chat=message.chat, trigger=message, actor=message.actor, person=person)


def system_prompt(context: TurnContext) -> tuple[str, dict]:
    """The system message the next request of this turn starts with, and the section's
    report row."""
    built = build_context(
        chat=context.chat,
        trigger=context.trigger,
        provider_info=PROVIDER,
        tool_specs=[],
        turn_context=context,
        sections=[memory_section],
    )
    return built.messages[0]["content"], built.report["sections"][0]


def propose(book, content, *, by=None, change="add", match=""):
    outcome = memory_propose(
        book=book, change=change, content=content, match=match, author=Author(person=by)
    )
    assert outcome.stored, outcome.message
    return outcome.entry


def approve(entry, reviewer=None, *, actor=None):
    memory_review(
        entry_id=entry.pk,
        revision=shown_revision(entry.pk),
        decision="approve",
        person=reviewer,
        actor=actor,
    )


def test_a_team_entry_shows_from_its_approval_and_goes_with_its_removal(owner):
    owner.is_staff = True
    owner.save()
    context = turn("hello")
    assert system_prompt(context)[1]["status"] == "empty"

    entry = propose(memory_book(scope="team"), FACT)
    assert entry.status == MemoryEntry.Status.PENDING
    text, report = system_prompt(turn("still there?"))
    assert FACT not in text and report["status"] == "empty"  # a proposal never shows

    approve(entry, owner)
    text, report = system_prompt(turn("when do we deploy?"))
    assert f"- {FACT}" in text and report["status"] == "included"

    memory_forget(entry_id=entry.pk, person=owner)
    text, report = system_prompt(turn("and now?"))
    assert FACT not in text and "## Memory" not in text and report["status"] == "empty"


def test_an_edit_shows_in_the_next_context(owner):
    owner.is_staff = True
    owner.save()
    book = memory_book(scope="team")
    approve(propose(book, FACT), owner)
    assert FACT in system_prompt(turn("first"))[0]
    replacement = "Deploys go out on Wednesdays now."
    approve(propose(book, replacement, change="replace", match="Tuesday"), owner)
    text, _ = system_prompt(turn("second"))
    assert replacement in text and FACT not in text


def test_an_entry_about_the_author_shows_in_their_chat_and_nowhere_else():
    alice = actor_get_or_create(channel="telegram", user_id="10", display_name="Alice")
    book = memory_book(scope="user", actor=alice)
    entry = propose(book, "Prefers answers in German.")
    assert not memory_maybe_in_prompt(chat=turn("hi").chat, actor=alice)  # pending
    approve(entry, actor=alice)  # the subject decides about themselves
    in_her_dm = turn("hi")
    assert "Prefers answers in German." in system_prompt(in_her_dm)[0]
    bobs_dm = turn("hi", chat_id="2", user="20", name="Bob")
    assert system_prompt(bobs_dm)[1]["status"] == "empty"
    assert not memory_maybe_in_prompt(chat=bobs_dm.chat, actor=bobs_dm.actor)


def test_another_chats_memory_leaves_this_chat_on_the_cheap_path(owner):
    owner.is_staff = True
    owner.save()
    elsewhere = turn("hi", chat_id="-100", kind="group")
    approve(propose(memory_book(scope="chat", chat=elsewhere.chat), "The ops room's fact."), owner)
    here = turn("hi", chat_id="-200", kind="group")
    assert not memory_maybe_in_prompt(chat=here.chat, actor=here.actor)
    assert system_prompt(here)[1]["status"] == "empty"
    assert memory_maybe_in_prompt(chat=elsewhere.chat, actor=elsewhere.actor)
    assert "The ops room's fact." in system_prompt(turn("again", chat_id="-100", kind="group"))[0]


def test_a_person_linked_later_finds_their_book_by_person(member):
    book = memory_book(scope="user", person=member)
    member.is_staff = True
    member.save()
    entry = propose(book, "Works from Lisbon.", by=member)
    if entry.status != MemoryEntry.Status.ACTIVE:
        approve(entry, member)
    # Marco's Telegram account, linked to his Person: no actor book, the person's is found.
    context = turn("hi", chat_id="30", user="30", name="Marco", person=None)
    actor_get_or_create(channel="telegram", user_id="30", person=member)
    context.actor.refresh_from_db()
    assert memory_maybe_in_prompt(chat=context.chat, actor=context.actor)
    assert "Works from Lisbon." in system_prompt(context)[0]
