"""The curator's grace period: idle time counts from its first run on this hub at the
earliest, so switching it on (or upgrading to it) archives nothing at once; and the skill
page says when a skill will become stale unless used."""

from datetime import timedelta

import pytest
from django.utils import timezone

from learning.curator import curator_run, curator_started_at
from learning.models import CuratorState
from skills.models import Skill, SkillEvent
from tests.chats.dashboard_helpers import login
from tests.learning.test_curator import add_skill, ago, status

pytestmark = pytest.mark.django_db

Kind = SkillEvent.Kind
Status = Skill.Status
DAY = timedelta(days=1)


@pytest.fixture
def old_hub():
    """A hub upgraded today: three skills last changed and used six months ago, never a
    curator run."""
    assert not CuratorState.objects.exists()
    add_skill("deploy", changed_days_ago=200, used_days_ago=[185, 180])
    add_skill("rollback", changed_days_ago=190)
    add_skill("oncall", changed_days_ago=183, used_days_ago=[182])
    return ["deploy", "oncall", "rollback"]


def test_a_fresh_curator_stales_and_archives_nothing_at_its_first_run(old_hub):
    now = timezone.now()
    report = curator_run(now=now)
    assert report.stale == [] and report.archived == [] and report.checked == 3
    assert {status(slug) for slug in old_hub} == {Status.ACTIVE}
    assert curator_started_at() == now
    assert not SkillEvent.objects.filter(kind__in=[Kind.STALE, Kind.ARCHIVE]).exists()
    # A second run the next day keeps the first run's date.
    curator_run(now=now + DAY)
    assert curator_started_at() == now


def test_thirty_days_after_its_first_run_they_are_stale_ninety_archived(old_hub):
    first = timezone.now()
    curator_run(now=first)
    assert curator_run(now=first + 29 * DAY).stale == []
    report = curator_run(now=first + 30 * DAY)
    assert sorted(report.stale) == old_hub and report.archived == []
    event = SkillEvent.objects.filter(slug="deploy", kind=Kind.STALE).get()
    assert event.detail["counted_from"] == "curator" and event.detail["days_unused"] == 30
    assert event.detail["curator_first_run"] == first.isoformat()
    assert curator_run(now=first + 89 * DAY).archived == []
    assert sorted(curator_run(now=first + 90 * DAY).archived) == old_hub


def test_a_use_after_the_first_run_counts_from_that_use(old_hub):
    first = timezone.now() - 40 * DAY
    CuratorState.objects.create(pk=1, first_run_at=first)
    skill = Skill.objects.get(slug="deploy")
    skill.usages.create(version=skill.current_version, created_at=first + 20 * DAY)
    report = curator_run()
    assert sorted(report.stale) == ["oncall", "rollback"]  # 40 days since the first run
    assert status("deploy") == Status.ACTIVE  # used 20 days ago


# --- the skill page ------------------------------------------------------------------------


def page(person, slug):
    response = login(person).get(f"/skills/{slug}/")
    assert response.status_code == 200
    return response.content.decode()


def day(moment):
    return f"{timezone.localtime(moment):%Y-%m-%d}"


def test_the_skill_page_says_when_a_skill_becomes_stale_unless_used(member, old_hub):
    first = timezone.now() - 10 * DAY
    CuratorState.objects.create(pk=1, first_run_at=first)
    html = page(member, "deploy")
    assert f"Becomes stale on {day(first + 30 * DAY)} unless used." in html

    add_skill("fresh", changed_days_ago=5, used_days_ago=[2])
    assert f"Becomes stale on {day(ago(2) + 30 * DAY)} unless used." in page(member, "fresh")

    Skill.objects.filter(slug="rollback").update(status=Status.STALE)
    assert f"Archived on {day(first + 90 * DAY)} unless used." in page(member, "rollback")


def test_before_the_curators_first_run_the_count_starts_no_earlier_than_today(member, old_hub):
    html = page(member, "deploy")
    assert f"Becomes stale on {day(timezone.now() + 30 * DAY)} unless used." in html


def test_pinned_archived_and_curator_off_skills_say_nothing(member, old_hub, settings):
    CuratorState.objects.create(pk=1, first_run_at=ago(10))
    Skill.objects.filter(slug="deploy").update(pinned=True)
    assert "unless used" not in page(member, "deploy")
    Skill.objects.filter(slug="oncall").update(status=Status.ARCHIVED)
    assert "unless used" not in page(member, "oncall")
    assert "unless used" in page(member, "rollback")
    settings.LEARNING_CURATOR_INTERVAL_HOURS = 0
    assert "unless used" not in page(member, "rollback")
