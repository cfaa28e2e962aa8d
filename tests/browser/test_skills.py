"""The skills pages in a real browser against the real stack: a reviewer approves a skill
change proposed in a group chat on the Approvals page, finds the skill in the library,
diffs two versions, rolls back to the first (a new version with the old text), pins it, and
no page trips the Content Security Policy."""

import os
import re

from playwright.sync_api import expect

from chats.models import ChatKind
from chats.services import actor_get_or_create, chat_get_or_create
from skills.models import Skill, SkillProposal, Via
from skills.services import Author, skill_create, skill_patch
from tests.browser.conftest import RequestsInFlight
from tests.browser.test_security import watch_policy
from tests.skills.helpers import skill_md

OPERATOR = Author(via=Via.COMMAND)


def two_versions_and_a_proposal(member) -> SkillProposal:
    """deploy-staging at version 2, and a patch the agent proposed in a group chat for
    marco, waiting for a skill reviewer (it would make version 3)."""
    assert skill_create(name="deploy-staging", content=skill_md(), author=OPERATOR).stored
    outcome = skill_patch(
        name="deploy-staging",
        old_string="make image",
        new_string="make image-fast",
        author=OPERATOR,
    )
    assert outcome.code == "applied", outcome.message
    group, _ = chat_get_or_create(
        channel="telegram", chat_id="-1001", kind=ChatKind.GROUP, title="Ops"
    )
    actor = actor_get_or_create(
        channel="telegram", user_id="501", display_name="Marco", person=member
    )
    in_group = Author(actor=actor, person=member, chat=group, reason="The health page lies.")
    outcome = skill_patch(
        name="deploy-staging",
        old_string="Check the health page.",
        new_string="Check /health and the logs.",
        author=in_group,
    )
    assert outcome.code == "proposed", outcome.message
    assert skill_create(
        name="write-report",
        content=skill_md(name="write-report", description="House style for reports."),
        author=OPERATOR,
    ).stored
    return outcome.proposal


def screenshot(page, name):
    if os.environ.get("HERMES_SCREENSHOTS"):  # docs/screenshots/ is made this way
        page.screenshot(path=f"{os.environ['HERMES_SCREENSHOTS']}/{name}.png", full_page=True)


def test_a_reviewer_approves_a_proposal_diffs_two_versions_and_rolls_back(page_for, make_person):
    stella = make_person("stella", is_staff=True)
    proposal = two_versions_and_a_proposal(make_person("marco"))
    page = page_for(stella)
    violations = watch_policy(page)
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm's confirmation
    page.reload()

    # The proposal waits on the Approvals page, with its diff; approving swaps in the outcome
    # and the badge follows.
    expect(page.locator("#approvals-badge")).to_have_text("1")
    page.click(".topbar nav a.nav-approvals")
    item = page.locator(f"#skill-proposal-{proposal.pk}")
    expect(item).to_contain_text("deploy-staging")
    expect(item).to_contain_text("based on version 2")
    expect(item).to_contain_text("The health page lies.")
    expect(item.locator("td.is-removed").first).to_contain_text("3. Check the health page.")
    expect(item.locator("td.is-added").first).to_contain_text("3. Check /health and the logs.")
    screenshot(page, "skill-approval")
    item.get_by_role("button", name="Approve").click()
    expect(item).to_contain_text("approved")
    expect(page.locator("#approvals-badge")).to_have_text("0")
    proposal.refresh_from_db()
    assert proposal.status == SkillProposal.Status.APPROVED
    assert Skill.objects.get(slug="deploy-staging").current_version.number == 3

    # The library, filtered as one types (htmx swaps the list and pushes the URL).
    page.click(".topbar nav a:text-is('Skills')")
    expect(page.locator("h1")).to_have_text("Skills")
    expect(page.locator("tr.skill-row")).to_have_count(2)
    page.fill("#skills-q", "staging")
    expect(page.locator("tr.skill-row")).to_have_count(1)
    expect(page).to_have_url(re.compile(r"/skills/\?q=staging"))
    screenshot(page, "skills-library")
    page.click("a.skill-name:text-is('deploy-staging')")
    expect(page.locator("#skill-head h1")).to_have_text("deploy-staging")
    expect(page.locator(".skill-version-line")).to_contain_text("Version 3, the current one")
    expect(page.locator("#skill-body")).to_contain_text("Check /health and the logs.")
    screenshot(page, "skill-page")

    # Version 1 against version 3, chosen on the diff page.
    page.goto("/skills/deploy-staging/diff")
    page.select_option("#diff-a", "1")
    page.select_option("#diff-b", "3")
    page.click("button:text-is('Compare')")
    expect(page.locator("#diff-summary")).to_contain_text("Version 1 (create")
    expect(page.locator("td.is-removed").first).to_have_text("    make image")
    expect(page.locator("td.is-added").first).to_have_text("    make image-fast")
    expect(page.locator("td.is-added").nth(1)).to_have_text("3. Check /health and the logs.")
    screenshot(page, "skill-diff")

    # Open version 1 from the history and roll back to it.
    page.goto("/skills/deploy-staging/")
    page.locator("#version-1 a").first.click()
    expect(page.locator(".skill-version-line")).to_contain_text("You are looking at version 1")
    page.locator("#skill-head").get_by_role("button", name="Roll back to version 1").click()
    expect(page.locator("#skill-notice")).to_have_text(
        "Rolled back to version 1: version 4 has its content and is current now."
    )
    expect(page.locator(".skill-version-line")).to_contain_text("Version 4, the current one")
    expect(page.locator("#skill-body")).to_contain_text("make image")
    expect(page.locator("#skill-body")).not_to_contain_text("make image-fast")
    expect(page.locator("#skill-body")).to_contain_text("Check the health page.")
    expect(page.locator("#version-4")).to_contain_text("rollback")
    expect(page).to_have_url(re.compile(r"/skills/deploy-staging/$"))
    skill = Skill.objects.get(slug="deploy-staging")
    assert skill.current_version.number == 4
    assert skill.current_version.skill_md == skill.versions.get(number=1).skill_md

    # Pin it: the head and the audit trail are swapped in place.
    page.locator("#skill-head").get_by_role("button", name="Pin").click()
    expect(page.locator("#skill-pinned")).to_have_text("pinned")
    expect(page.locator("#skill-events li").first).to_contain_text("Pinned")
    assert Skill.objects.get(slug="deploy-staging").pinned

    page.reload()
    expect(page.locator("#skill-events li").first).to_contain_text("Pinned")
    settle = RequestsInFlight(page)
    page.goto("/skills/?status=all")
    settle.wait_quiet("/skills/?status=all")
    expect(page.locator("tr.skill-row").first).to_contain_text("pinned")
    assert violations == []
