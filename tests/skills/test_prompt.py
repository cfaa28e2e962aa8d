"""The skills index of the system prompt: lines cut to what and when, pinned first, within
its budget."""

import pytest

from chats.agent.tokens import count_tokens
from skills.index import DESCRIPTION_CHARS
from skills.models import Skill, SkillVersion
from skills.prompt import skills_section
from skills.selectors import IndexRow, skills_index_rows

pytestmark = pytest.mark.django_db


def add(slug, *, category="", description="Does a thing.", status="active", pinned=False):
    skill = Skill.objects.create(
        slug=slug, category=category, description=description, status=status, pinned=pinned
    )
    skill.current_version = SkillVersion.objects.create(
        skill=skill, number=1, change="create", skill_md="x", content_hash="h"
    )
    skill.save()
    return skill


def test_no_skills_no_section():
    assert skills_section.render(None) == ""


def test_active_skills_listed_pinned_first_archived_never():
    add("zeta", pinned=True)
    add("alpha", category="ops", description="Line one.\nLine two " + "long " * 80)
    add("gone", status="archived")
    text = skills_section.render(None)
    lines = text.splitlines()
    assert lines[0] == "## Skills"
    assert lines[2] == "- zeta: Does a thing."
    assert lines[3].startswith("- alpha [ops]: Line one. Line two long") and lines[3].endswith("…")
    assert len(lines[3]) <= len("- alpha [ops]: ") + DESCRIPTION_CHARS
    assert "gone" not in text


def test_five_hundred_skills_stay_within_the_budget_and_say_how_to_list_the_rest(
    monkeypatch, settings
):
    from skills import prompt

    rows = [
        IndexRow(f"skill-{n:03d}", f"cat-{n % 7}", f"Procedure number {n} for the team.", False)
        for n in range(500)
    ]
    monkeypatch.setattr(prompt, "skills_index_rows", lambda **audience: rows)
    for budget in (100, 400, 1200, 3000):
        settings.SKILLS_INDEX_TOKENS = budget
        text = skills_section.render(None)
        assert count_tokens(text) <= budget
        shown = sum(1 for line in text.splitlines() if line.startswith("- skill-"))
        assert 0 <= shown < 500
        assert f"- … and {500 - shown} more: call skills_list" in text
    monkeypatch.setattr(prompt, "skills_index_rows", lambda **audience: rows[:5])
    settings.SKILLS_INDEX_TOKENS = 1200
    everything = skills_section.render(None)
    assert "more: call skills_list" not in everything


def test_the_index_reads_only_short_columns():
    add("alpha")
    [row] = skills_index_rows()
    assert row == IndexRow("alpha", "", "Does a thing.", False)
