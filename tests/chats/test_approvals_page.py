"""The Approvals page as a whole: memory proposals and skill changes counted once (the page's
total is the badge's), and bulk decisions that cover every section, each item bound to the
version the page showed; whoever may not decide an item changes nothing with it."""

import re

import pytest
from django.contrib.auth.models import Group

from chats.models import ChatKind
from chats.services import actor_get_or_create, chat_get_or_create
from memory.models import MemoryEntry, MemoryEvent
from memory.services import Author as MemoryAuthor
from memory.services import memory_book, memory_propose
from skills.models import Skill, SkillEvent, SkillProposal
from skills.services import Author, skill_create, skill_edit, skill_patch
from tests.chats.dashboard_helpers import login
from tests.skills.helpers import BODY, skill_md

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
APPROVALS = "/memory/approvals/"
BULK = "/memory/approvals/decide"


def badge(page: str) -> int:
    return int(re.search(r'id="approvals-badge"[^>]*>(\d+)<', page).group(1))


def waiting(page: str) -> int:
    return int(re.search(r'class="bulk-count">(\d+) waiting<', page).group(1))


@pytest.fixture
def stella(make_person):
    """Staff: decides team memory and skill changes."""
    return make_person("stella", is_staff=True)


@pytest.fixture
def group_author(member):
    """marco in a Telegram group: his skill changes wait for a skill reviewer."""
    chat, _ = chat_get_or_create(channel="telegram", chat_id="-1001", kind=ChatKind.GROUP)
    actor = actor_get_or_create(
        channel="telegram", user_id="501", display_name="Marco", person=member
    )
    return Author(actor=actor, person=member, chat=chat)


@pytest.fixture
def skill(stella):
    """deploy-staging at version 1 (created by a reviewer: applied at once)."""
    return skill_create(
        name="deploy-staging", content=skill_md(), author=Author(person=stella, via="dashboard")
    ).skill


@pytest.fixture
def patch(skill, group_author) -> SkillProposal:
    outcome = skill_patch(
        name="deploy-staging",
        old_string="make image",
        new_string="make image-fast",
        author=group_author,
    )
    assert outcome.code == "proposed"
    return outcome.proposal


@pytest.fixture
def fact(owner) -> MemoryEntry:
    outcome = memory_propose(
        book=memory_book(scope="team"),
        change="add",
        author=MemoryAuthor(person=owner),
        content="Deploys happen on Tuesdays.",
    )
    assert outcome.code == "pending"
    return outcome.entry


def ticked_entry(entry: MemoryEntry) -> str:
    return f"{entry.pk}:{MemoryEntry.objects.get(pk=entry.pk).revision}"


def ticked_skill(proposal: SkillProposal) -> str:
    return f"{proposal.pk}:{proposal.base_number or ''}"


# --- one count ------------------------------------------------------------------------------


def test_the_page_counts_what_the_badge_counts(stella, fact, patch):
    page = login(stella).get(APPROVALS).text
    assert badge(page) == 2 and waiting(page) == 2
    # Every waiting item, memory or skill, has a box the bulk buttons act on.
    assert f'name="entry" value="{ticked_entry(fact)}" form="bulk-form"' in page
    assert f'name="skill" value="{ticked_skill(patch)}" form="bulk-form"' in page
    assert "memory proposals and skill changes" in page  # what the bulk buttons act on


def test_with_only_skill_changes_waiting_the_bulk_buttons_are_there(stella, patch):
    page = login(stella).get(APPROVALS).text
    assert badge(page) == 1 and waiting(page) == 1
    assert ">Approve selected</button>" in page and "Nothing waits" not in page


def test_nothing_waiting_shows_the_empty_state_and_no_bulk_buttons(stella):
    page = login(stella).get(APPROVALS).text
    assert badge(page) == 0 and "Nothing waits for your decision." in page
    assert "Approve selected" not in page and "bulk-count" not in page


def test_a_memory_only_reviewer_counts_only_memory(member, owner, fact, patch):
    """marco may decide nothing here: the team fact is staff's, the skill change a reviewer's."""
    about = memory_propose(
        book=memory_book(scope="user", person=member),
        change="add",
        author=MemoryAuthor(person=owner),
        content="Prefers tea.",
    ).entry
    page = login(member).get(APPROVALS).text
    assert badge(page) == 1 and waiting(page) == 1
    assert f'value="{ticked_entry(about)}"' in page and 'name="skill"' not in page


# --- bulk decisions across sections ---------------------------------------------------------


def test_bulk_approve_decides_memory_and_skill_changes_as_shown(stella, fact, patch):
    client = login(stella)
    response = client.post(
        BULK,
        {"decision": "approve", "entry": [ticked_entry(fact)], "skill": [ticked_skill(patch)]},
        headers=HTMX,
    )
    assert response.status_code == 200
    assert "Approved 2 proposals." in response.text
    assert f'id="proposal-{fact.pk}"' not in response.text
    assert f'id="skill-proposal-{patch.pk}"' not in response.text
    assert 'id="approvals-badge" class="nav-count is-zero"' in response.text
    assert "Nothing waits for your decision." in response.text
    assert MemoryEntry.objects.get(pk=fact.pk).status == MemoryEntry.Status.ACTIVE
    patch.refresh_from_db()
    assert patch.status == SkillProposal.Status.APPROVED and patch.decided_by == stella
    assert Skill.objects.get(slug="deploy-staging").current_version.number == 2
    assert SkillEvent.objects.get(kind="approved", proposal=patch).via == "dashboard"
    assert MemoryEvent.objects.get(kind="approved", entry=fact).via == "dashboard"


def test_bulk_reject_without_javascript_redirects_with_the_outcome(
    stella, fact, patch, group_author
):
    new = skill_create(name="triage", content=skill_md(name="triage"), author=group_author).proposal
    client = login(stella)
    response = client.post(
        BULK,
        {
            "decision": "reject",
            "entry": [ticked_entry(fact)],
            "skill": [ticked_skill(patch), ticked_skill(new)],
        },
    )
    assert response.status_code == 302 and response.url == APPROVALS
    page = client.get(APPROVALS).text
    assert "Rejected 3 proposals." in page and badge(page) == 0
    statuses = set(SkillProposal.objects.values_list("status", flat=True))
    assert statuses == {SkillProposal.Status.REJECTED}
    assert MemoryEntry.objects.get(pk=fact.pk).status == MemoryEntry.Status.REJECTED
    assert not Skill.objects.filter(slug="triage").exists()


def test_a_skill_change_that_moved_on_is_not_applied_by_a_bulk_decision(
    stella, fact, patch, group_author
):
    shown = ticked_skill(patch)  # the page showed it against version 1
    own = Author(person=stella, via="dashboard")
    edited = skill_edit(
        name="deploy-staging", content=skill_md(body=BODY + "4. Done.\n"), author=own
    )
    assert edited.code == "applied"  # version 2 now: the patch is superseded
    response = login(stella).post(
        BULK, {"decision": "approve", "entry": [ticked_entry(fact)], "skill": [shown]}, headers=HTMX
    )
    assert "Approved 1 proposal." in response.text
    assert (
        "deploy-staging changed since" in response.text and "nothing was applied" in response.text
    )
    assert Skill.objects.get(slug="deploy-staging").current_version.number == 2
    assert (
        "make image-fast" not in Skill.objects.get(slug="deploy-staging").current_version.skill_md
    )


def test_a_skill_change_shown_against_another_version_decides_nothing(stella, patch):
    response = login(stella).post(
        BULK, {"decision": "approve", "skill": [f"{patch.pk}:7"]}, headers=HTMX
    )
    assert "shown against another version" in response.text
    patch.refresh_from_db()
    assert patch.status == SkillProposal.Status.PENDING
    assert f'id="skill-proposal-{patch.pk}"' in response.text  # still offered


def test_people_who_may_not_decide_change_nothing_in_bulk(
    member, outsider, make_person, fact, patch
):
    other_group = make_person("otto")  # in another reviewers group than the skills one
    other_group.groups.add(Group.objects.create(name="memory reviewers"))
    for person in (member, outsider, other_group):
        response = login(person).post(
            BULK,
            {"decision": "approve", "entry": [ticked_entry(fact)], "skill": [ticked_skill(patch)]},
            headers=HTMX,
        )
        assert "Approved" not in response.text
        assert f"#{fact.pk}: Not found." in response.text
        assert f"skill change #{patch.pk}: not found." in response.text
        assert "deploy-staging" not in response.text and "Tuesdays" not in response.text
    assert MemoryEntry.objects.get(pk=fact.pk).status == MemoryEntry.Status.PENDING
    patch.refresh_from_db()
    assert patch.status == SkillProposal.Status.PENDING
    assert not SkillEvent.objects.filter(kind__in=["approved", "rejected"]).exists()


def test_bad_bulk_input_is_refused_with_a_clear_answer(stella, patch):
    client = login(stella)
    nothing = client.post(BULK, {"decision": "approve"}, headers=HTMX)
    assert "Select at least one proposal first." in nothing.text
    for garbled in ("abc", "1:2:3", "-4:1", f"{patch.pk}:x"):
        response = client.post(BULK, {"decision": "approve", "skill": [garbled]}, headers=HTMX)
        assert "Unknown proposal." in response.text
    too_many = [f"{n}:1" for n in range(1, 60)]
    response = client.post(BULK, {"decision": "approve", "skill": too_many}, headers=HTMX)
    assert "at most" in response.text
    patch.refresh_from_db()
    assert patch.status == SkillProposal.Status.PENDING
