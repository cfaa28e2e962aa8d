"""Skills that schedules use are referenced for the curator: a skill an enabled schedule's
prompt names (`/slug` or the slug as a word) is never marked stale nor archived; once the
schedule is paused or gone, it fades like any other."""

from datetime import timedelta

import pytest
from django.utils import timezone

from learning import curator
from learning.curator import curator_run
from learning.models import CuratorState
from schedules.services import schedule_pause
from schedules.skills import skills_in_schedules, slug_candidates
from skills.format import render_skill_md
from skills.models import Skill, SkillVersion, Via
from skills.services import Author, skill_import

pytestmark = pytest.mark.django_db


def old_skill(slug: str) -> None:
    content = render_skill_md(name=slug, description=f"How to {slug}.", body="# Steps\n1. Go.\n")
    outcome = skill_import(
        name=slug, content=content, files={}, category="", author=Author(via=Via.COMMAND)
    )
    assert outcome.code == "applied", outcome.message
    SkillVersion.objects.filter(skill=outcome.skill).update(
        created_at=timezone.now() - timedelta(days=200)
    )


def status(slug: str) -> str:
    return Skill.objects.get(slug=slug).status


def test_the_provider_is_registered_with_the_curator():
    assert curator._providers["schedules"] is skills_in_schedules


def test_slug_candidates_are_whole_words_with_or_without_a_slash():
    text = "Run /nightly-backup, then use Weekly-Report. Reports: see ops.notes."
    found = slug_candidates(text)
    assert {"nightly-backup", "weekly-report", "reports", "ops.notes"} <= found
    assert "report" not in found and "backup" not in found


def test_skills_named_by_an_enabled_schedule_are_never_archived(make_schedule, owner):
    CuratorState.objects.create(pk=1, first_run_at=timezone.now() - timedelta(days=3650))
    for slug in ("nightly-backup", "weekly-report", "other"):
        old_skill(slug)
    schedule = make_schedule(prompt="Run /nightly-backup and then use weekly-report to sum up.")
    assert skills_in_schedules() == {"nightly-backup", "weekly-report"}
    report = curator_run()
    assert report.archived == ["other"]
    assert status("nightly-backup") == status("weekly-report") == Skill.Status.ACTIVE

    schedule_pause(schedule=schedule, reason="holiday", by=owner)  # paused: protects nothing
    assert skills_in_schedules() == set()
    assert sorted(curator_run().archived) == ["nightly-backup", "weekly-report"]
