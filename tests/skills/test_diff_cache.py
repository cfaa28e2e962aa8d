"""The Approvals page, the diff page and the Telegram notice share one bounded, cached
diff per pair of contents: opening a page again, or notifying, never recomputes it."""

import uuid

import pytest
from django.test import Client

from bots.skill_reviews import prompt_text, skill_proposal_notify
from skills import diff as diff_module
from skills.models import Via
from skills.services import Author, skill_edit, skill_patch
from tests.chats.dashboard_helpers import login
from tests.skills.helpers import BODY, skill_md

pytestmark = pytest.mark.django_db

APPROVALS = "/memory/approvals/"


@pytest.fixture
def computed(monkeypatch):
    """The content diffs computed (not read from the cache) during the test."""
    calls = []
    real = diff_module.content_diff

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(diff_module, "content_diff", counting)
    return calls


def test_the_approvals_page_and_the_telegram_notice_compute_a_diff_once(
    skill, group_author, staff_reviewer, computed, django_capture_on_commit_callbacks
):
    token = uuid.uuid4().hex  # content no earlier test put in the cache
    with django_capture_on_commit_callbacks(execute=True):
        outcome = skill_patch(
            name="deploy-staging",
            old_string="make image",
            new_string=f"make image-{token}",
            author=group_author,
        )
    assert outcome.code == "proposed"
    assert len(computed) == 1  # once, after the proposal was stored
    reviewer = login(staff_reviewer)
    for _ in range(2):
        page = reviewer.get(APPROVALS).content.decode()
        assert f"make image-{token}" in page
    skill_proposal_notify(proposal=outcome.proposal)
    assert len(computed) == 1


def test_a_pathological_proposal_shows_the_fallback_on_the_page(
    skill, group_author, staff_reviewer
):
    token = uuid.uuid4().hex
    # Every line differs from the base in a way no alignment can shortcut: thousands of
    # lines on both sides, more rows than a page shows.
    base_body = f"# {token}\n" + "".join(f"- {n % 2}\n" for n in range(8_000))
    new_body = f"# {token}\n" + "".join(f"- {(n // 2) % 2}\n" for n in range(8_000))
    operator = Author(via=Via.COMMAND)  # applies at once
    edited = skill_edit(name="deploy-staging", content=skill_md(body=base_body), author=operator)
    assert edited.code == "applied", edited.message
    outcome = skill_edit(
        name="deploy-staging", content=skill_md(body=new_body), author=group_author
    )
    assert outcome.code == "proposed", outcome.message
    page = login(staff_reviewer).get(APPROVALS).content.decode()
    assert "Too large to diff here: " in page and "lines changed" in page
    assert BODY not in page


def test_the_diff_page_shows_the_fallback_with_a_raw_link_and_computes_once(
    skill, staff_reviewer, computed
):
    token = uuid.uuid4().hex
    operator = Author(via=Via.COMMAND)
    for body in (
        f"# {token}\n" + "".join(f"- {n % 2}\n" for n in range(8_000)),
        f"# {token}\n" + "".join(f"- {(n // 2) % 2}\n" for n in range(8_000)),
    ):
        edited = skill_edit(name="deploy-staging", content=skill_md(body=body), author=operator)
        assert edited.code == "applied", edited.message
    reviewer = login(staff_reviewer)
    for _ in range(2):
        page = reviewer.get("/skills/deploy-staging/diff?a=2&b=3").content.decode()
        assert "Too large to diff here: " in page and "lines changed" in page
        assert 'href="/skills/deploy-staging/raw?version=3&amp;path=SKILL.md">View raw' in page
    assert len(computed) == 1


def test_the_telegram_notice_of_a_pathological_proposal_says_it_is_too_large(
    skill, group_author, staff_reviewer
):
    token = uuid.uuid4().hex
    operator = Author(via=Via.COMMAND)
    base = f"# {token}\n" + "".join(f"- {n % 2}\n" for n in range(8_000))
    assert skill_edit(name="deploy-staging", content=skill_md(body=base), author=operator).code
    new = f"# {token}\n" + "".join(f"- {(n // 2) % 2}\n" for n in range(8_000))
    outcome = skill_edit(name="deploy-staging", content=skill_md(body=new), author=group_author)
    text = prompt_text(outcome.proposal, reviewer=staff_reviewer)
    assert "Too large to diff here: " in text and "View the raw text on the dashboard" in text


def test_a_too_large_proposal_links_its_raw_text_that_only_reviewers_read(
    skill, group_author, staff_reviewer, group_reviewer, member, outsider, owner, api_for
):
    token = uuid.uuid4().hex
    operator = Author(via=Via.COMMAND)
    base = f"# {token}\n" + "".join(f"- {n % 2}\n" for n in range(8_000))
    assert skill_edit(name="deploy-staging", content=skill_md(body=base), author=operator).code
    new = f"# {token}\n" + "".join(f"- {(n // 2) % 2}\n" for n in range(8_000))
    proposal = skill_edit(
        name="deploy-staging", content=skill_md(body=new), author=group_author
    ).proposal
    raw = f"/skills/proposals/{proposal.pk}/raw"
    page = login(group_reviewer).get(APPROVALS).content.decode()
    assert f'href="{raw}?path=SKILL.md">View raw' in page
    for reviewer in (staff_reviewer, group_reviewer):
        response = login(reviewer).get(f"{raw}?path=SKILL.md")
        assert response.status_code == 200 and response.content.decode() == proposal.skill_md
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert login(reviewer).get(f"{raw}?path=references/none.md").status_code == 404
    # The proposer (not a reviewer), an outsider and a room owner: as if it did not exist.
    for person in (member, outsider, owner):
        assert login(person).get(raw).status_code == 404
        assert login(person).get("/skills/proposals/999999/raw").status_code == 404
    anonymous = Client().get(raw)
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    by_token = api_for(staff_reviewer).get(raw)  # an API token is not a dashboard session
    assert by_token.status_code == 302 and "/accounts/login/" in by_token["Location"]
