"""The tool handlers as the model meets them: paging, missing arguments, unknown names."""

import pytest

from chats.agent.registry import TurnContext
from chats.services import message_ingest
from skills.apps import _check_approval_setting
from skills.models import Skill, SkillVersion
from skills.tools import _list, _manage, _view

pytestmark = pytest.mark.django_db


@pytest.fixture
def context():
    message = message_ingest(
        channel="telegram", chat_id="7", user_id="7", user_name="Ann", text="hi", chat_kind="dm"
    ).message
    return TurnContext(chat=message.chat, trigger=message, actor=message.actor)


def add(slug, category=""):
    skill = Skill.objects.create(slug=slug, category=category, description=f"About {slug}.")
    skill.current_version = SkillVersion.objects.create(
        skill=skill, number=1, change="create", skill_md="x", content_hash="h"
    )
    skill.save()


def test_skills_list_pages_filters_and_says_when_there_are_none(context):
    assert "No skills yet" in _list(context, {})
    for n in range(105):
        add(f"s-{n:03d}", category="ops" if n < 3 else "")
    first = _list(context, {})
    assert first.startswith("105 skills; showing 1–100. Call again with offset=100 for more.")
    assert _list(context, {"offset": 100}).startswith("105 skills; showing 101–105.")
    assert _list(context, {"offset": -5}).startswith("105 skills; showing 1–100.")
    assert _list(context, {"category": "ops"}).count("\n- ") == 3
    assert _list(context, {"query": "s-104"}).endswith("- s-104: About s-104.")
    assert _list(context, {"query": "nothing"}) == "No skills match."


def test_view_of_an_unknown_or_archived_skill_points_to_skills_list(context):
    add("gone")
    Skill.objects.filter(slug="gone").update(status="archived")
    for name in ("missing", "gone"):
        assert "Call skills_list" in _view(context, {"name": name})


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"action": "create", "name": "a"}, "action create needs content."),
        ({"action": "patch", "name": "a", "old_string": "x"}, "action patch needs new_string."),
        ({"action": "write_file", "name": "a"}, "needs file_path, file_content."),
        ({"action": "patch", "name": "a", "old_string": "x", "new_string": "y"}, "no skill named"),
        ({"action": "create", "name": "Bad Name", "content": "x"}, "not a valid slug"),
    ],
)
def test_manage_says_what_is_missing(context, arguments, says):
    assert says in _manage(context, arguments)


def test_an_unknown_approval_policy_fails_the_system_check(settings):
    settings.SKILLS_APPROVAL = "sometimes"
    [error] = _check_approval_setting()
    assert error.id == "skills.E001" and "own_chat, review, auto" in error.msg
    settings.SKILLS_APPROVAL = "review"
    assert _check_approval_setting() == []
