"""A reviewer's decision never holds the skill's row lock while the scanner reads the
content: an approval, a rollback and a promotion scan first and lock only to store."""

import threading

import pytest

from skills import reviews
from skills.models import Skill
from skills.reviews import skill_promote, skill_proposal_decide, skill_rollback
from skills.services import skill_create, skill_patch, skill_usage_record
from tests.skills.helpers import skill_md
from tests.skills.test_services_locking import WAIT, _in_thread

pytestmark = [pytest.mark.storage, pytest.mark.django_db(transaction=True)]


def _while_scanning(monkeypatch, action):
    """Run `action` in a thread with the scanner held open; meanwhile lock the skill's row
    (a recorded use takes it) from another connection. Returns the action's result."""
    scanning, release = threading.Event(), threading.Event()
    real_scan = reviews.scan_draft

    def blocking_scan(*args, **kwargs):
        scanning.set()
        if not release.wait(WAIT):
            raise AssertionError("the test never released the scan")
        return real_scan(*args, **kwargs)

    monkeypatch.setattr(reviews, "scan_draft", blocking_scan)
    results: dict = {}
    worker = _in_thread(action, results, "action")
    try:
        assert scanning.wait(WAIT), "the action never scanned"
        skill = Skill.objects.get(slug="deploy-staging")
        writer = _in_thread(
            lambda: skill_usage_record(skill=skill, version=skill.current_version),
            results,
            "use",
        )
        writer.join(WAIT)
        assert not writer.is_alive(), "a use of the skill waited for the scan: a lock is held"
        assert "use_error" not in results, results.get("use_error")
        assert worker.is_alive() and not release.is_set()
    finally:
        release.set()
        worker.join(WAIT)
    assert "action_error" not in results, results.get("action_error")
    return results["action"]


def test_an_approval_scans_before_it_locks(
    reviewer_author, group_author, staff_reviewer, monkeypatch
):
    skill_create(name="deploy-staging", content=skill_md(), author=reviewer_author)
    proposal = skill_patch(
        name="deploy-staging", old_string="make image", new_string="make it", author=group_author
    ).proposal
    decided = _while_scanning(
        monkeypatch,
        lambda: skill_proposal_decide(
            proposal_id=proposal.pk, decision="approve", shown_version=1, person=staff_reviewer
        ),
    )
    assert decided.status == "approved"
    assert Skill.objects.get().current_version.number == 2


def test_a_rollback_scans_before_it_locks(reviewer_author, staff_reviewer, monkeypatch):
    skill_create(name="deploy-staging", content=skill_md(), author=reviewer_author)
    skill_patch(
        name="deploy-staging", old_string="make image", new_string="make it", author=reviewer_author
    )
    version = _while_scanning(
        monkeypatch,
        lambda: skill_rollback(
            name="deploy-staging", to_number=1, shown_version=2, person=staff_reviewer
        ),
    )
    assert version.number == 3 and "make image" in version.skill_md


def test_a_promotion_scans_before_it_locks(dm_author, staff_reviewer, monkeypatch):
    created = skill_create(name="deploy-staging", content=skill_md(), author=dm_author)
    assert created.skill.scope == "personal", created.message
    promoted = _while_scanning(
        monkeypatch,
        lambda: skill_promote(name="deploy-staging", shown_version=1, person=staff_reviewer),
    )
    assert promoted.scope == "team"
