"""A display name never fakes the proposer (issue 19 item 7): the Approvals page and Telegram
name the person or integration behind the actor, the display name only as marked secondary
text, for skill and memory proposals alike."""

import html

import pytest

from bots.skill_reviews import prompt_text
from chats.labels import identity_label
from chats.models import ChatKind, ChatMember
from chats.services import actor_get_or_create, chat_get_or_create, chat_member_ensure
from memory.services import Author as MemoryAuthor
from memory.services import memory_book, memory_propose
from skills.services import Author, skill_create
from tests.chats.dashboard_helpers import login
from tests.skills.helpers import skill_md

pytestmark = pytest.mark.django_db

APPROVALS = "/memory/approvals/"
FAKE = "rev (skill reviewer)"


@pytest.fixture
def carol(make_person):
    return make_person("carol")


@pytest.fixture
def api_user(carol):
    """A user of carol's API integration who calls themself a skill reviewer."""
    chat, _ = chat_get_or_create(channel="api", chat_id="conv-9", kind=ChatKind.API)
    chat_member_ensure(chat=chat, person=carol, role=ChatMember.Role.OWNER)
    actor = actor_get_or_create(
        channel="api", user_id="u-17", display_name=FAKE, namespace=f"owner:{carol.pk}"
    )
    return actor, chat


def page_text(person) -> str:
    return html.unescape(login(person).get(APPROVALS).text)


def test_an_api_users_skill_proposal_names_the_integration_not_the_display_name(
    api_user, staff_reviewer
):
    actor, chat = api_user
    outcome = skill_create(
        name="rotate", content=skill_md(name="rotate"), author=Author(actor=actor, chat=chat)
    )
    assert outcome.code == "proposed"  # an integration's conversation is never private
    label = f"user 'u-17' of carol's API integration (shown as \"{FAKE}\")"
    assert outcome.proposal.author_label == label
    page = page_text(staff_reviewer)
    assert f"proposed by {label}" in page and f"proposed by {FAKE}" not in page
    telegram = html.unescape(prompt_text(outcome.proposal, reviewer=staff_reviewer))
    assert f"Proposed by {label}" in telegram and f"Proposed by {FAKE}" not in telegram


def test_an_api_users_memory_proposal_names_the_integration_too(api_user, staff_reviewer):
    actor, chat = api_user
    outcome = memory_propose(
        book=memory_book(scope="team"),
        change="add",
        author=MemoryAuthor(actor=actor, chat=chat),
        content="Deploys happen on Tuesdays.",
    )
    assert outcome.code == "pending", outcome.message
    label = f"user 'u-17' of carol's API integration (shown as \"{FAKE}\")"
    assert outcome.entry.proposer_label == label
    page = page_text(staff_reviewer)
    assert f"proposed by {label}" in page and f"proposed by {FAKE}" not in page


def test_linked_unlinked_and_terminal_actors_are_named_by_identity(member):
    linked = actor_get_or_create(
        channel="telegram", user_id="501", display_name=FAKE, person=member
    )
    assert identity_label(actor=linked) == f'marco (shown as "{FAKE}")'
    same = actor_get_or_create(channel="telegram", user_id="502", display_name="Marco")
    assert identity_label(actor=same) == 'Telegram user 502 (shown as "Marco")'
    unlinked = actor_get_or_create(channel="telegram", user_id="4242", display_name=FAKE)
    assert identity_label(actor=unlinked) == f'Telegram user 4242 (shown as "{FAKE}")'
    login_name = actor_get_or_create(channel="cli", user_id="ops", namespace="os")
    assert identity_label(actor=login_name) == "terminal login ops"
    web = actor_get_or_create(channel="web", user_id=member.pk, display_name="Marco", person=member)
    assert identity_label(actor=web, person=member) == "marco"  # only case differs: no noise
    assert identity_label() == ""
