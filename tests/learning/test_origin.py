"""origin="review" in the memory and skills services: always a pending proposal, whatever
the approval policy says for the same change from a turn."""

import pytest

from chats.agent.registry import ORIGIN_REVIEW
from chats.models import ChatKind, Turn
from chats.services import actor_get_or_create, chat_get_or_create, message_ingest
from learning.models import Review
from memory import services as memory_services
from memory.models import MemoryEntry
from memory.services import memory_book, memory_propose
from skills import services as skill_services
from skills.models import Skill, SkillProposal

pytestmark = pytest.mark.django_db

SKILL_MD = "---\nname: rota\ndescription: The on-call rota.\n---\n\nAsk Bob.\n"


@pytest.fixture
def dm(make_person):
    alice = make_person("alice")
    actor = actor_get_or_create(
        channel="telegram", user_id="10", display_name="Alice", person=alice
    )
    chat, _ = chat_get_or_create(channel="telegram", chat_id="10", kind=ChatKind.DM)
    message = message_ingest(
        channel="telegram", chat_id="10", user_id="10", text="remember that I like tea"
    ).message
    turn = Turn.objects.create(chat=chat, trigger=message, status=Turn.Status.COMPLETED)
    review = Review.objects.create(chat=chat, turn=turn, focus=Review.Focus.COMBINED)
    return alice, actor, chat, message, review


@pytest.mark.parametrize("origin", ["chat", ORIGIN_REVIEW])
def test_memory_applies_under_auto_policies_except_for_a_review(dm, settings, origin):
    settings.MEMORY_APPROVAL_USER = "auto"
    settings.MEMORY_APPROVAL_TEAM = "auto"
    alice, actor, chat, message, review = dm
    author = memory_services.Author(
        actor=actor,
        person=alice,
        chat=chat,
        message=message,
        asked=True,
        origin=origin,
        review_id=review.pk if origin == ORIGIN_REVIEW else None,
    )
    for book, text in (
        (memory_book(scope="user", person=alice), "Likes tea."),
        (memory_book(scope="team"), "Standup is at nine."),
    ):
        outcome = memory_propose(book=book, change="add", author=author, content=text)
        assert outcome.code == ("pending" if origin == ORIGIN_REVIEW else "saved")
    if origin == ORIGIN_REVIEW:
        assert set(MemoryEntry.objects.values_list("status", "review_id")) == {
            (MemoryEntry.Status.PENDING, review.pk)
        }
        # And a review never withdraws a pending proposal, not even one it made.
        withdrawn = memory_propose(
            book=memory_book(scope="team"), change="remove", author=author, match="Standup"
        )
        assert withdrawn.code == "busy"
        assert MemoryEntry.objects.filter(status=MemoryEntry.Status.PENDING).count() == 2


@pytest.mark.parametrize("origin", ["chat", ORIGIN_REVIEW])
def test_skills_apply_under_the_auto_policy_except_for_a_review(dm, settings, origin):
    settings.SKILLS_APPROVAL = "auto"
    alice, actor, chat, message, review = dm
    author = skill_services.Author(
        actor=actor,
        person=alice,
        chat=chat,
        origin=origin,
        review_id=review.pk if origin == ORIGIN_REVIEW else None,
    )
    outcome = skill_services.skill_create(name="rota", content=SKILL_MD, author=author)
    if origin == ORIGIN_REVIEW:
        assert outcome.code == "proposed" and not Skill.objects.exists()
        assert SkillProposal.objects.get().review == review
    else:
        assert outcome.code == "applied" and Skill.objects.filter(slug="rota").exists()
