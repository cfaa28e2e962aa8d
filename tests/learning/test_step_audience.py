"""A review's tool calls on the learning page go through the rules of what they proposed: a
fact's text in a call's arguments or result is shown only to who may read that fact, and a
call that proposed nothing shows its tool only. Run end to end: a real group turn, the
review run as its task would, the page read by each person."""

from urllib.parse import quote

import pytest

from chats.models import Chat, ChatMember
from chats.services import actor_get_or_create, chat_get_or_create, chat_member_ensure
from learning.models import Review
from learning.tasks import run_review
from memory.models import MemoryEntry
from memory.reviews import memory_review
from skills.models import SkillProposal
from tests.chats.dashboard_helpers import login
from tests.fakes import openai_server as fake_openai
from tests.learning.helpers import chat_turn

pytestmark = pytest.mark.django_db(transaction=True)

BOB_FACT = "Bob is interviewing at another company."
TEAM_FACT = "The VPN gateway is called Ruby."
NOTHING_MADE = "Carol has a doctor's appointment on Friday."


def learning_url(chat):
    return f"/chats/{quote(chat.chat_key, safe='/:')}/learning"


@pytest.fixture
def crew(make_person, fake, queued, settings):
    """A Telegram group: Alice and Bob speak, Olga owns it, Stella (staff) reads it; one
    memory review ran whose calls proposed a fact about Bob, a team fact, and nothing (a
    user fact without `about` is refused)."""
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 2
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 0
    people = {name: make_person(name) for name in ("alice", "bob", "olga")}
    people["stella"] = make_person("stella", is_staff=True)
    for user_id, name in (("10", "alice"), ("20", "bob")):
        actor_get_or_create(
            channel="telegram", user_id=user_id, display_name=name.title(), person=people[name]
        )
    group = {"chat_id": "-100", "kind": "group"}
    chat_turn(fake, "Between us: I'm interviewing elsewhere.", user="20", name="Bob", **group)
    chat_turn(fake, "Our VPN gateway is Ruby, by the way.", user="10", name="Alice", **group)
    chat = Chat.objects.get(external_id="-100")
    chat_member_ensure(chat=chat, person=people["olga"], role=ChatMember.Role.OWNER)
    for name in ("alice", "bob", "stella"):
        chat_member_ensure(chat=chat, person=people[name])
    fake.script(
        fake_openai.tool_calls(
            [
                (
                    "r1",
                    "memory",
                    {"action": "add", "scope": "user", "about": "Bob", "content": BOB_FACT},
                ),
                ("r2", "memory", {"action": "add", "scope": "team", "content": TEAM_FACT}),
                ("r3", "memory", {"action": "add", "scope": "user", "content": NOTHING_MADE}),
            ]
        ),
        fake_openai.text(f"Proposed: {BOB_FACT} {TEAM_FACT}"),
    )
    run_review(queued[-1])
    review = Review.objects.get(pk=queued[-1])
    assert review.status == Review.Status.DONE and review.tool_calls == 3
    return chat, review, people


def page(person, chat) -> str:
    response = login(person).get(learning_url(chat))
    assert response.status_code == 200
    return response.content.decode()


def test_each_step_names_the_proposal_it_made(crew):
    chat, review, _ = crew
    bob_entry = MemoryEntry.objects.get(book__scope="user")
    team_entry = MemoryEntry.objects.get(book__scope="team")
    assert [step["memory_entries"] for step in review.steps] == [
        [bob_entry.pk],
        [team_entry.pk],
        [],
    ]
    assert all(step["skill_proposals"] == [] for step in review.steps)


def test_alice_never_reads_bobs_pending_fact_in_the_steps_bob_does(crew):
    chat, review, people = crew
    alice = page(people["alice"], chat)
    assert BOB_FACT not in alice  # not in the arguments, the result or the outcome
    assert "(text not shown here)" in alice
    assert "arguments and result not shown here" in alice
    assert "outcome not shown here" in alice
    assert NOTHING_MADE not in alice  # a call that proposed nothing: its tool only

    bob = page(people["bob"], chat)
    assert bob.count(BOB_FACT) >= 2  # the proposal and the call's arguments
    assert NOTHING_MADE not in bob


def test_reviewers_read_the_steps_of_what_they_decide_only(crew):
    chat, review, people = crew
    stella = page(people["stella"], chat)  # staff: decides team facts, not Bob's own
    assert TEAM_FACT in stella and "&quot;content&quot;: &quot;The VPN gateway" in stella
    assert BOB_FACT not in stella
    olga = page(people["olga"], chat)  # the group's owner decides its chat facts only
    assert TEAM_FACT not in olga and BOB_FACT not in olga


def test_after_bob_rejects_it_the_fact_is_in_no_step_for_anyone(crew):
    chat, review, people = crew
    entry = MemoryEntry.objects.get(book__scope="user")
    memory_review(
        entry_id=entry.pk, decision="reject", revision=entry.revision, person=people["bob"]
    )
    for name in ("alice", "bob", "olga", "stella"):
        assert BOB_FACT not in page(people[name], chat), name


def test_once_approved_and_shared_the_groups_readers_see_its_step(crew):
    chat, review, people = crew
    entry = MemoryEntry.objects.get(book__scope="user")
    memory_review(
        entry_id=entry.pk, decision="approve", revision=entry.revision, person=people["bob"]
    )
    alice = page(people["alice"], chat)
    assert "&quot;content&quot;: &quot;Bob is interviewing" in alice


def test_a_skill_change_step_follows_the_skills_rule_for_unreviewed_text(crew, make_person):
    """Skills show a proposal's text to skill reviewers, its writer and its chat's readers."""
    chat, review, people = crew
    elsewhere, _ = chat_get_or_create(channel="web", chat_id="other", title="Other")
    proposal = SkillProposal.objects.create(
        slug="vpn-howto",
        action="create",
        skill_md="---\nname: vpn-howto\n---\nConnect to SKILLTEXT.",
        content_hash="h",
        review=review,
        source_chat=elsewhere,  # a chat Alice does not read
    )
    review.steps.append(
        {
            "tool": "skill_manage",
            "arguments": {"action": "create", "content": "Connect to SKILLTEXT."},
            "result": "Proposed.",
            "is_error": False,
            "refused": False,
            "memory_entries": [],
            "skill_proposals": [proposal.pk],
        }
    )
    review.save(update_fields=["steps"])
    assert "SKILLTEXT" not in page(people["alice"], chat)
    assert "SKILLTEXT" in page(people["stella"], chat)  # staff: a skill reviewer
    SkillProposal.objects.filter(pk=proposal.pk).update(source_chat=chat)
    assert "SKILLTEXT" in page(people["alice"], chat)  # a reader of the chat it came from


def test_steps_recorded_before_they_named_their_proposals_follow_all_the_review_made(crew):
    chat, review, people = crew
    for step in review.steps:
        step.pop("memory_entries")
        step.pop("skill_proposals")
    review.save(update_fields=["steps"])
    assert TEAM_FACT not in page(people["alice"], chat)
    assert BOB_FACT not in page(people["stella"], chat)
    assert BOB_FACT not in page(people["alice"], chat)
