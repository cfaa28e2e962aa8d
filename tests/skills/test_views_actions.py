"""Reviewer actions on the skill page: roll back (bound to the version shown), pin / unpin,
archive / restore, with htmx and without JavaScript; everyone else is refused and nothing
changes."""

import html

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from skills.models import Skill, SkillEvent, SkillVersion
from skills.services import skill_patch
from tests.chats.dashboard_helpers import login
from tests.skills.conftest import HOSTILE
from tests.skills.test_views import make_skill

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
PAGE = "/skills/deploy-staging/"
ROLLBACK = "/skills/deploy-staging/rollback"
PIN = "/skills/deploy-staging/pin"
STATUS = "/skills/deploy-staging/status"


@pytest.fixture
def deploy(reviewer_author):
    """deploy-staging at version 3: created, then two patches."""
    make_skill("deploy-staging", reviewer_author, category="ops")
    for old, new in (("make image", "make image-fast"), ("--wait", "--wait --timeout 600")):
        outcome = skill_patch(
            name="deploy-staging", old_string=old, new_string=new, author=reviewer_author
        )
        assert outcome.code == "applied"
    return Skill.objects.get(slug="deploy-staging")


def state():
    """What a refused action must leave alone."""
    skill = Skill.objects.get(slug="deploy-staging")
    return (
        skill.current_version.number,
        skill.pinned,
        skill.status,
        SkillVersion.objects.count(),
        list(SkillEvent.objects.values_list("pk", flat=True)),
    )


def notice(page: str) -> str:
    start = page.index('id="skill-notice">') + len('id="skill-notice">')
    return html.unescape(page[start : page.index("</p>", start)])


# --- roll back ---------------------------------------------------------------------------------


def test_a_rollback_without_javascript_makes_a_new_version_and_redirects_with_a_message(
    deploy, staff_reviewer
):
    client = login(staff_reviewer)
    response = client.post(ROLLBACK, {"to_version": 1, "shown_version": 3, "view": 1})
    assert response.status_code == 302 and response["Location"] == PAGE
    skill = Skill.objects.get()
    assert skill.current_version.number == 4 and skill.current_version.change == "rollback"
    assert skill.current_version.skill_md == skill.versions.get(number=1).skill_md
    event = skill.events.last()
    assert (event.kind, event.via, event.person) == ("rollback", "dashboard", staff_reviewer)
    page = client.get(PAGE).content.decode()
    assert "Rolled back to version 1: version 4 has its content and is current now." in page
    assert (
        "Version 4, the current one" in page
        and "make image-fast" not in page.split('id="skill-versions"')[0]
    )


def test_a_rollback_with_htmx_swaps_the_skill_and_shows_the_new_version(deploy, group_reviewer):
    response = login(group_reviewer).post(
        ROLLBACK, {"to_version": 2, "shown_version": 3, "view": 2}, headers=HTMX
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert page.lstrip().startswith('<section class="card skill" id="skill"')
    assert notice(page) == "Rolled back to version 2: version 4 has its content and is current now."
    assert "Version 4, the current one" in page
    assert response["HX-Replace-Url"] == PAGE  # off ?version=2, onto the current version
    assert 'name="shown_version" value="4"' in page  # the next action is bound to version 4
    assert Skill.objects.get().current_version.number == 4


@pytest.mark.parametrize("headers", [HTMX, {}], ids=["htmx", "no-js"])
def test_a_stale_rollback_answers_409_with_the_reason_and_the_page_as_it_is_now(
    deploy, reviewer_author, staff_reviewer, headers
):
    # The page was loaded at version 3; meanwhile the agent made version 4.
    skill_patch(
        name="deploy-staging",
        old_string="Check the health page.",
        new_string="Check /health.",
        author=reviewer_author,
    )
    before = state()
    response = login(staff_reviewer).post(
        ROLLBACK, {"to_version": 1, "shown_version": 3}, headers=headers
    )
    page = response.content.decode()
    assert response.status_code == 409
    assert "Not rolled back: deploy-staging changed after you loaded this page" in notice(page)
    assert "(you saw version 3, it is at version 4 now)" in notice(page)
    assert "Version 4, the current one" in page and "Check /health." in page
    assert ("<html" in page) is (not headers)  # htmx gets the section, a plain post the page
    assert state() == before


def test_a_rollback_to_a_version_todays_scanner_blocks_is_refused_and_audited(
    deploy, staff_reviewer
):
    SkillVersion.objects.filter(number=1).update(
        skill_md=SkillVersion.objects.get(number=1).skill_md + f"\n{HOSTILE}\n"
    )
    versions = SkillVersion.objects.count()
    response = login(staff_reviewer).post(
        ROLLBACK, {"to_version": 1, "shown_version": 3}, headers=HTMX
    )
    page = response.content.decode()
    assert response.status_code == 409
    assert "Not rolled back: version 1 is blocked by today's content scan." in notice(page)
    assert SkillVersion.objects.count() == versions
    assert SkillEvent.objects.last().kind == "blocked"
    assert "Blocked by the scanner" in page  # the audit trail shows what was found


def test_a_rollback_to_a_version_that_does_not_exist_or_a_bad_form_changes_nothing(
    deploy, staff_reviewer
):
    client = login(staff_reviewer)
    before = state()
    response = client.post(ROLLBACK, {"to_version": 9, "shown_version": 3}, headers=HTMX)
    assert response.status_code == 409
    assert notice(response.content.decode()) == "Not rolled back: deploy-staging has no version 9."
    for bad in ({}, {"to_version": "x", "shown_version": 3}, {"to_version": 1}):
        assert client.post(ROLLBACK, bad).status_code == 400
    assert client.post(ROLLBACK, {"to_version": 1, "shown_version": 10**12}).status_code == 400
    assert client.get(ROLLBACK).status_code == 405
    assert client.post("/skills/nothing-here/rollback", {"to_version": 1}).status_code == 404
    assert state() == before


# --- pin and archive ---------------------------------------------------------------------------


def test_pin_and_unpin_with_htmx_swap_the_head_and_the_audit_trail(deploy, staff_reviewer):
    client = login(staff_reviewer)
    response = client.post(PIN, {"pinned": "1", "view": 2}, headers=HTMX)
    page = response.content.decode()
    assert response.status_code == 200
    assert page.lstrip().startswith('<div id="skill-head"')
    assert notice(page) == "Pinned: listed first in every chat's skills index."
    assert 'id="skill-pinned"' in page and 'name="pinned" value="0"' in page
    assert "You are looking at version 2" in page  # the head of the version that was shown
    events = page[page.index('id="skill-events"') :]
    assert 'hx-swap-oob="true"' in events[:200] and "Pinned" in events
    assert Skill.objects.get().pinned

    page = client.post(PIN, {"pinned": "0"}, headers=HTMX).content.decode()
    assert notice(page) == "Unpinned: listed with the others again."
    assert 'id="skill-pinned"' not in page and not Skill.objects.get().pinned
    kinds = list(SkillEvent.objects.filter(kind__in=["pin", "unpin"]).values_list("kind", "via"))
    assert kinds == [("pin", "dashboard"), ("unpin", "dashboard")]


def test_archive_and_restore_without_javascript_redirect_back_with_a_message(
    deploy, staff_reviewer
):
    client = login(staff_reviewer)
    response = client.post(STATUS, {"archived": "1", "view": 2})
    assert response.status_code == 302 and response["Location"] == PAGE + "?version=2"
    page = client.get(response["Location"]).content.decode()
    assert "Archived: out of every chat" in page and 'id="archived-banner"' in page
    assert Skill.objects.get().status == "archived"
    assert client.get("/skills/").content.decode().count('id="skill-deploy-staging"') == 0

    response = client.post(STATUS, {"archived": "0"})
    assert response.status_code == 302 and response["Location"] == PAGE
    page = client.get(PAGE).content.decode()
    assert "Restored: back in every chat" in page and 'id="archived-banner"' not in page
    assert Skill.objects.get().status == "active"
    response = client.post(PIN, {"pinned": "1"})
    assert response.status_code == 302 and Skill.objects.get().pinned
    assert "Pinned: listed first" in client.get(PAGE).content.decode()


def test_archive_with_htmx_shows_the_banner_in_the_swapped_head(deploy, staff_reviewer):
    page = login(staff_reviewer).post(STATUS, {"archived": "1"}, headers=HTMX).content.decode()
    assert page.lstrip().startswith('<div id="skill-head"')
    assert 'id="archived-banner"' in page and 'name="archived" value="0"' in page
    assert "Archived" in page[page.index('id="skill-events"') :]


# --- who may act -------------------------------------------------------------------------------


@pytest.fixture
def refused_people(make_person, member, outsider):
    memory_reviewer = make_person("mira")
    memory_reviewer.groups.add(Group.objects.create(name="memory reviewers"))
    former_staff = make_person("fred", is_staff=True, is_active=False)
    return {
        "member": member,
        "outsider": outsider,
        "memory reviewer": memory_reviewer,
        "deactivated staff": former_staff,
    }


ACTIONS = [
    (ROLLBACK, {"to_version": 1, "shown_version": 3}),
    (PIN, {"pinned": "1"}),
    (STATUS, {"archived": "1"}),
]


def test_nobody_but_skill_reviewers_acts_and_nothing_changes(deploy, refused_people):
    before = state()
    for who, person in refused_people.items():
        client = login(person)
        for url, data in ACTIONS:
            for headers in (HTMX, {}):
                response = client.post(url, data, headers=headers)
                if who == "deactivated staff":  # no longer logged in at all
                    assert response.status_code == 302, (who, url)
                    assert response["Location"].startswith("/accounts/login/")
                else:
                    assert response.status_code == 403, (who, url)
                    assert b"Only skill reviewers" in response.content
    anonymous = Client()
    for url, data in ACTIONS:
        response = anonymous.post(url, data)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert state() == before


def test_an_action_without_the_csrf_token_is_refused(deploy, staff_reviewer):
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_reviewer)
    before = state()
    for url, data in ACTIONS:
        assert client.post(url, data).status_code == 403
        assert client.post(url, data, headers=HTMX).status_code == 403
    assert state() == before
    # With the token the page gives, the same client may act.
    page = client.get(PAGE).content.decode()
    token = page.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    assert client.post(PIN, {"pinned": "1", "csrfmiddlewaretoken": token}).status_code == 302
    assert Skill.objects.get().pinned


def test_a_version_with_the_current_content_offers_no_rollback(deploy, staff_reviewer, member):
    client = login(staff_reviewer)
    assert client.post(ROLLBACK, {"to_version": 1, "shown_version": 3}).status_code == 302
    page = client.get(PAGE).content.decode()
    assert "Roll back to version 1" not in page  # version 4 has its content
    assert "Roll back to version 2" in page and "Roll back to version 3" in page
    assert "same content as the current version" in page
    # Everyone reads which version it is, and only that one: 2 and 3 differ.
    seen = login(member).get(PAGE).content.decode()
    assert seen.count("same content as the current version") == 1
    assert seen.index('id="version-1"') < seen.index("same content as the current version")
    old = client.get(PAGE + "?version=1").content.decode()
    assert "which has the same content" in old and "Roll back to version 1" not in old
    before = state()
    response = client.post(ROLLBACK, {"to_version": 1, "shown_version": 4}, headers=HTMX)
    assert response.status_code == 409
    assert "has the same content as the current version 4" in notice(response.content.decode())
    assert state() == before
