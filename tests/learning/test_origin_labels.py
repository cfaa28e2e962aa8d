"""Proposals a background review made say so where people decide them: "proposed by the
review after turn N" on the Approvals page, for memory and for skill changes, with the review
read in the same queries whatever the number of proposals; a turn's own proposal names its
author instead, and a review never makes a proposal visible to someone who may not decide it."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats.agent.registry import ORIGIN_REVIEW
from chats.services import actor_get_or_create
from learning.models import Review
from memory.services import Author as MemoryAuthor
from memory.services import memory_book, memory_propose
from skills.services import Author as SkillAuthor
from skills.services import skill_create
from tests.chats.dashboard_helpers import login
from tests.skills.helpers import skill_md

pytestmark = pytest.mark.django_db

APPROVALS = "/memory/approvals/"


@pytest.fixture
def staff(make_person):
    return make_person("stella", is_staff=True)


@pytest.fixture
def group_author(member, team_chat):
    """marco in the team's web room: his skill changes wait for a reviewer."""
    actor = actor_get_or_create(channel="web", user_id="marco", display_name="Marco")
    return SkillAuthor(actor=actor, person=member, chat=team_chat)


@pytest.fixture
def review(team_chat):
    return Review.objects.create(
        chat=team_chat, focus=Review.Focus.COMBINED, turn_number=12, status=Review.Status.DONE
    )


def review_fact(review, text: str):
    outcome = memory_propose(
        book=memory_book(scope="team"),
        change="add",
        author=MemoryAuthor(chat=review.chat, origin=ORIGIN_REVIEW, review_id=review.pk),
        content=text,
    )
    assert outcome.code == "pending", outcome.message
    return outcome.entry


def review_skill(review, name: str):
    author = SkillAuthor(chat=review.chat, origin=ORIGIN_REVIEW, review_id=review.pk)
    outcome = skill_create(name=name, content=skill_md(name=name), author=author)
    assert outcome.code == "proposed", outcome.message
    return outcome.proposal


def item(page: str, element_id: str) -> str:
    start = page.index(f'id="{element_id}"')
    return page[start : page.index("</li>", start)]


def test_memory_and_skill_proposals_of_a_review_name_it(review, staff, owner, group_author):
    fact = review_fact(review, "Standups start at 9.")
    by_turn = memory_propose(
        book=memory_book(scope="team"),
        change="add",
        author=MemoryAuthor(person=owner, chat=review.chat),
        content="Deploys happen on Tuesdays.",
    ).entry
    skill = review_skill(review, "standup-notes")
    by_person = skill_create(
        name="deploy-staging", content=skill_md(), author=group_author
    ).proposal
    page = login(staff).get(APPROVALS).text
    label = "proposed by the review after turn 12"
    assert label in item(page, f"proposal-{fact.pk}")
    assert label in item(page, f"skill-proposal-{skill.pk}")
    assert label not in item(page, f"proposal-{by_turn.pk}")
    assert "proposed by olivia" in item(page, f"proposal-{by_turn.pk}")
    assert label not in item(page, f"skill-proposal-{by_person.pk}")
    assert "proposed by marco" in item(page, f"skill-proposal-{by_person.pk}")


def test_the_labels_cost_no_query_per_proposal(review, staff):
    review_fact(review, "Standups start at 9.")
    review_skill(review, "standup-notes")
    client = login(staff)
    with CaptureQueriesContext(connection) as one_each:
        page = client.get(APPROVALS).text
    assert page.count("proposed by the review after turn 12") == 2
    later = Review.objects.create(chat=review.chat, focus=Review.Focus.COMBINED, turn_number=20)
    for n in range(3):
        review_fact(later, f"Fact number {n} holds.")
        review_skill(later, f"notes-{n}")
    with CaptureQueriesContext(connection) as four_each:
        page = client.get(APPROVALS).text
    assert page.count("proposed by the review after turn 20") == 6
    assert len(four_each.captured_queries) == len(one_each.captured_queries)


def test_a_review_shows_nothing_to_people_who_may_not_decide(review, member, outsider):
    review_fact(review, "Standups start at 9.")
    review_skill(review, "standup-notes")
    for person in (member, outsider):  # member reads the reviewed chat; neither decides
        page = login(person).get(APPROVALS).text
        assert "proposed by the review" not in page and "Standups" not in page
        assert "standup-notes" not in page and "Nothing waits for your decision." in page
