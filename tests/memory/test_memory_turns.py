"""Memory through the engine: the fake model issues real tool calls over HTTP, and what it
sees in later requests is the proof of what reached the prompt."""

import pytest

from chats.agent.turns import message_received
from chats.models import Chat
from chats.services import actor_get_or_create, message_ingest
from memory.models import MemoryEntry, MemoryEvent
from memory.reviews import memory_review
from tests.fakes import openai_server as fake_openai
from tests.memory.helpers import shown_revision
from tests.turns import run, system_prompt

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0)
        yield server


def say(text, *, chat_id, user, name, channel="telegram", kind=None, person=None):
    result = message_ingest(
        channel=channel,
        chat_id=chat_id,
        user_id=user,
        user_name=name,
        text=text,
        chat_kind=kind,
        person=person,
    )
    return message_received(result, enqueue=False)


def tool_result(request, call_id="m1") -> str:
    return next(m["content"] for m in request["messages"] if m.get("tool_call_id") == call_id)


def remember(call_id="m1", **arguments):
    return fake_openai.tool_calls([(call_id, "memory", arguments)])


def test_add_pending_approved_then_in_the_next_prompt_not_the_current_one(fake, owner):
    # olivia (owner fixture, staff) reviews team entries.
    owner.is_staff = True
    owner.save()
    fact = "Deploys go out from the release branch every Tuesday."
    fake.script(
        remember(action="add", scope="team", content=fact),
        fake_openai.text("Noted, a reviewer will confirm it."),
    )
    run(say("our deploy day is Tuesday", chat_id="1", user="10", name="Alice", kind="dm"))
    first, second = fake.requests
    assert "pending approval by a reviewer" in tool_result(second)
    assert "% of 2,200 chars" in tool_result(second)
    # The proposal never reached a prompt, not even in the same turn's second request.
    assert fact not in system_prompt(first) and fact not in system_prompt(second)
    entry = MemoryEntry.objects.get()
    assert entry.status == "pending"

    fake.script(fake_openai.text("ok"))
    run(say("anything new?", chat_id="1", user="10", name="Alice", kind="dm"))
    assert fact not in system_prompt(fake.requests[-1])  # still pending

    memory_review(
        entry_id=entry.pk, revision=shown_revision(entry.pk), decision="approve", person=owner
    )
    fake.script(fake_openai.text("Tuesday."))
    run(say("when do we deploy?", chat_id="1", user="10", name="Alice", kind="dm"))
    assert f"- {fact}" in system_prompt(fake.requests[-1])
    kinds = list(entry.events.values_list("kind", flat=True))
    assert kinds == [MemoryEvent.Kind.PROPOSED, MemoryEvent.Kind.APPROVED]


def test_a_write_during_a_turn_does_not_change_that_turns_prompt(fake):
    fake.script(
        remember(action="add", scope="user", content="Prefers answers in German."),
        fake_openai.text("Alles klar."),
    )
    run(
        say(
            "remember that I prefer answers in German",
            chat_id="1",
            user="10",
            name="Alice",
            kind="dm",
        )
    )
    first, second = fake.requests
    assert "Saved to memory about Alice" in tool_result(second)
    assert "German" not in system_prompt(first) and "German" not in system_prompt(second)
    fake.script(fake_openai.text("Hallo"))
    run(say("hi", chat_id="1", user="10", name="Alice", kind="dm"))
    assert "- Prefers answers in German." in system_prompt(fake.requests[-1])


def test_alice_bob_group_and_dms_keep_private_entries_private(fake, make_person):
    alice = make_person("alice")
    bob = make_person("bob")
    for user, person, name in (("10", alice, "Alice"), ("20", bob, "Bob"), ("30", None, "Carol")):
        actor_get_or_create(channel="telegram", user_id=user, display_name=name, person=person)

    # In the group, Alice asks to remember: lands in her user memory as a shared entry, which
    # waits for her own approval (a group is not her own chat: nothing is widened unseen).
    fake.script(
        remember(action="add", scope="user", content="Prefers short answers."),
        fake_openai.text("Will do."),
    )
    run(
        say(
            "remember I prefer short answers", chat_id="-100", user="10", name="Alice", kind="group"
        )
    )
    entry = MemoryEntry.objects.get()
    assert entry.status == "pending" and entry.book.person == alice
    assert entry.visibility == "shared"
    assert "pending approval by alice" in tool_result(fake.requests[-1])
    memory_review(
        entry_id=entry.pk, revision=shown_revision(entry.pk), decision="approve", person=alice
    )

    # In her DM she tells something private (auto-approved: she asked, in her words, alone).
    fake.script(
        remember(action="add", scope="user", content="Is interviewing at another company."),
        fake_openai.text("Noted."),
    )
    run(
        say(
            "please remember I'm interviewing at another company",
            chat_id="10",
            user="10",
            name="Alice",
        )
    )
    private = MemoryEntry.objects.get(text__startswith="Is interviewing")
    assert private.visibility == "private" and private.status == "active"

    # Alice's next group turn: her shared entry yes, the private one no.
    fake.script(fake_openai.text("Sure."))
    run(say("@hermes status?", chat_id="-100", user="10", name="Alice", kind="group"))
    group_prompt = system_prompt(fake.requests[-1])
    assert "Prefers short answers." in group_prompt
    assert "interviewing" not in group_prompt

    # Alice's own DM sees both.
    fake.script(fake_openai.text("Sure."))
    run(say("hi", chat_id="10", user="10", name="Alice"))
    dm_prompt = system_prompt(fake.requests[-1])
    assert "Prefers short answers." in dm_prompt and "interviewing" in dm_prompt

    # Bob's DM never sees anything of Alice's.
    fake.script(fake_openai.text("Hi Bob."))
    run(say("hi", chat_id="20", user="20", name="Bob"))
    bob_prompt = system_prompt(fake.requests[-1])
    assert "short answers" not in bob_prompt and "interviewing" not in bob_prompt

    # Bob in the group sees neither (user entries follow the trigger author only).
    fake.script(fake_openai.text("Hi."))
    run(say("@hermes hi", chat_id="-100", user="20", name="Bob", kind="group"))
    assert "short answers" not in system_prompt(fake.requests[-1])


def test_in_a_group_user_scope_means_the_author_unless_another_is_named(fake, make_person):
    alice = make_person("alice")
    bob = make_person("bob")
    actor_get_or_create(channel="telegram", user_id="10", display_name="Alice", person=alice)
    actor_get_or_create(channel="telegram", user_id="20", display_name="Bob", person=bob)
    say("morning", chat_id="-100", user="20", name="Bob", kind="group")
    fake.script(
        remember(action="add", scope="user", content="Is on call this week.", about="Bob"),
        remember("m2", action="add", scope="user", content="x", about="Zed"),
        fake_openai.text("Noted for Bob."),
    )
    run(say("remember Bob is on call", chat_id="-100", user="10", name="Alice", kind="group"))
    entry = MemoryEntry.objects.get()
    # About Bob, asked by Alice: Bob must approve it himself.
    assert entry.book.person == bob and entry.status == "pending"
    assert "pending approval by bob" in tool_result(fake.requests[1])
    assert "nobody in this chat is called 'Zed'" in tool_result(fake.requests[2], "m2")
    assert "Alice" in tool_result(fake.requests[2], "m2")


def test_chat_scope_lands_in_that_chat_and_needs_a_chat_admin(fake, owner, member, team_chat):
    fake.script(
        remember(action="add", scope="chat", content="This room tracks the Q3 launch."),
        fake_openai.text("Proposed."),
    )
    result = message_ingest(
        channel="web",
        chat_id=team_chat.external_id,
        user_id=member.get_username(),
        user_name=member.get_username(),
        text="note that this room is about the Q3 launch",
        person=member,
    )
    run(message_received(result, enqueue=False))
    entry = MemoryEntry.objects.get()
    assert entry.book.chat == Chat.objects.get(pk=team_chat.pk) and entry.status == "pending"
    assert "pending approval by a chat owner or admin" in tool_result(fake.requests[1])
