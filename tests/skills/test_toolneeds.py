"""Skills that name the tools they need (`metadata.hermes.requires_tools`): the format, the
stored copy, availability in a chat (on / off / needs approval / not on this hub), the index
mark, the `skill_view` note, and the skill page's check for one chat its viewer may read."""

from urllib.parse import quote

import pytest

from chats.agent.registry import ORIGIN_REVIEW, TurnContext
from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from skills.format import SkillFormatError, parse_skill_md, required_tools
from skills.models import Skill
from skills.prompt import skills_section
from skills.services import skill_create, skill_edit
from skills.tools import _view
from tests.chats.dashboard_helpers import login
from tests.skills.helpers import skill_md
from toolservers.availability import (
    available_names,
    tool_availability,
    tool_availability_for,
)
from toolservers.services import VIA_COMMAND, server_add, server_tools_record, toolset_set

pytestmark = pytest.mark.django_db

NEEDS = {"hermes": {"requires_tools": ["staging__build", "staging__push", "memory"]}}


def test_the_front_matter_names_tools_as_hermes_does_bounded_and_validated():
    parsed = parse_skill_md(skill_md(metadata=NEEDS))
    assert required_tools(parsed.front_matter) == {
        "tools": ["staging__build", "staging__push", "memory"]
    }
    spaced = parse_skill_md(
        skill_md(
            metadata={"hermes": {"requires_tools": "a__b, a__b c__d", "requires_toolsets": ["ops"]}}
        )
    )
    assert required_tools(spaced.front_matter) == {"tools": ["a__b", "c__d"], "toolsets": ["ops"]}
    assert required_tools(parse_skill_md(skill_md()).front_matter) == {}
    refused = {
        "too many": {"requires_tools": [f"s__t{n}" for n in range(33)]},
        "not a name": {"requires_tools": ["rm -rf /"]},
        "too long": {"requires_tools": ["x" * 65]},
        "not a list": {"requires_toolsets": {"a": 1}},
    }
    for why, hermes in refused.items():
        with pytest.raises(SkillFormatError, match="metadata.hermes.requires_tool"):
            parse_skill_md(skill_md(metadata={"hermes": hermes}))
        assert why


def test_the_skill_keeps_what_its_current_version_names(staff_reviewer, reviewer_author):
    skill_create(name="deploy-staging", content=skill_md(metadata=NEEDS), author=reviewer_author)
    skill = Skill.objects.get(slug="deploy-staging")
    assert skill.required_tools == {"tools": ["staging__build", "staging__push", "memory"]}
    skill_edit(name="deploy-staging", content=skill_md(), author=reviewer_author, base_version=1)
    skill.refresh_from_db()
    assert skill.required_tools == {}


@pytest.fixture
def staging():
    """A tool server with four tools: build (on, allowed), push (on, asks), purge (denied),
    logs (announced, not on); nothing is on anywhere until a chat turns it on."""
    server = server_add(
        by=None, via=VIA_COMMAND, slug="staging", transport="http", url="http://127.0.0.1:9/mcp"
    )
    server_tools_record(
        server=server,
        announced=[
            {"name": "build", "annotations": {"readOnlyHint": True}},
            {"name": "push", "annotations": {}},
            {"name": "purge", "annotations": {}},
            {"name": "logs", "annotations": {"readOnlyHint": True}},
        ],
    )
    return server


def turn_on(chat, server):
    for tool, policy in (("build", ""), ("push", ""), ("purge", "deny")):
        toolset_set(
            by=None, via=VIA_COMMAND, chat=chat, server=server, tool_name=tool, policy=policy
        )


def test_each_named_tool_is_on_needs_approval_off_or_not_on_this_hub(team_chat, staging):
    turn_on(team_chat, staging)
    answers = tool_availability(
        team_chat,
        tools=["staging__build", "staging__push", "staging__purge", "staging__logs",
               "staging__nothing", "other__build", "memory", "terminal"],
        toolsets=["staging", "browser", "skills"],
    )  # fmt: skip
    states = {(item.kind, item.name): (item.state, item.why) for item in answers}
    assert states == {
        ("tool", "staging__build"): ("on", ""),
        ("tool", "staging__push"): ("ask", ""),
        ("tool", "staging__purge"): ("off", "denied in this chat"),
        ("tool", "staging__logs"): ("off", "not turned on in this chat"),
        ("tool", "staging__nothing"): ("missing", ""),
        ("tool", "other__build"): ("missing", ""),
        ("tool", "memory"): ("on", "built in"),
        ("tool", "terminal"): ("missing", ""),
        ("toolset", "staging"): ("on", ""),
        ("toolset", "browser"): ("missing", ""),
        ("toolset", "skills"): ("on", "built in"),
    }
    # The index's cheaper reading (active tools only) agrees on what is available.
    names = [item.name for item in answers if item.kind == "tool"]
    sets = [item.name for item in answers if item.kind == "toolset"]
    assert available_names(team_chat, tools=names, toolsets=sets) == {
        (item.kind, item.name) for item in answers if item.available
    }
    # Another chat has nothing on: the hub's tools are off there, not missing.
    other, _ = chat_get_or_create(channel="web", chat_id="elsewhere")
    elsewhere = tool_availability(other, tools=["staging__build"], toolsets=["staging"])
    assert [(item.state, item.label) for item in elsewhere] == [
        ("off", "off (not turned on in this chat)"),
        ("off", "off (not turned on in this chat)"),
    ]


def test_only_readers_of_a_chat_learn_what_it_has_on(
    team_chat, staging, owner, member, outsider, make_person
):
    from django.core.exceptions import PermissionDenied

    turn_on(team_chat, staging)
    stranger = make_person("gina")
    theirs, _ = chat_get_or_create(channel="web", chat_id="gina-room")
    chat_member_ensure(chat=theirs, person=stranger, role=ChatMember.Role.OWNER)
    for person in (owner, member):
        answers = tool_availability_for(chat=team_chat, person=person, tools=["staging__build"])
        assert answers[0].state == "on"
    for person in (outsider, stranger):  # no chat, and a member of another chat
        with pytest.raises(PermissionDenied):
            tool_availability_for(chat=team_chat, person=person, tools=["staging__build"])


def _context(chat, *, origin="chat"):
    result = message_ingest(
        channel=chat.channel, chat_id=chat.external_id, user_id="u1", user_name="Ana", text="deploy"
    )
    return TurnContext(chat=chat, trigger=result.message, origin=origin)


def test_the_index_marks_a_skill_whose_tools_are_not_on_in_this_chat(
    team_chat, staging, reviewer_author
):
    skill_create(name="deploy-staging", content=skill_md(metadata=NEEDS), author=reviewer_author)
    builtin = {"hermes": {"requires_tools": ["memory"]}}
    notes = skill_md(name="notes", description="Take notes.", metadata=builtin)
    skill_create(name="notes", content=notes, author=reviewer_author)
    skill_create(
        name="plain", content=skill_md(name="plain", description="Plain."), author=reviewer_author
    )
    other, _ = chat_get_or_create(channel="web", chat_id="elsewhere")

    def lines(chat, **extra):
        text = str(skills_section.render(_context(chat, **extra)))
        return {line.split(":")[0][2:]: line for line in text.splitlines() if line.startswith("- ")}

    off = lines(other)
    assert off["deploy-staging"].endswith(
        "(some of its tools are not on in this chat: skill_view says which)"
    )
    assert "not on" not in off["notes"] and "not on" not in off["plain"]  # memory is built in
    turn_on(team_chat, staging)  # build on, push asks: both available to the model
    on = lines(team_chat)
    assert "not on" not in on["deploy-staging"]
    # A background review gets no tool-server tools: its index is not about a chat's tools.
    assert "not on" not in lines(other, origin=ORIGIN_REVIEW)["deploy-staging"]


def test_skill_view_says_tool_by_tool_what_this_chat_has_on(team_chat, staging, reviewer_author):
    content = skill_md(
        metadata={
            "hermes": {
                "requires_tools": [
                    "staging__build",
                    "staging__push",
                    "staging__purge",
                    "gone__tool",
                ]
            }
        }
    )
    skill_create(name="deploy-staging", content=content, author=reviewer_author)
    turn_on(team_chat, staging)
    viewed = _view(_context(team_chat), {"name": "deploy-staging"})
    assert viewed.startswith("Skill deploy-staging (version 1):")
    assert "Tools this skill names, in this chat:\n" in viewed
    assert "- tool staging__build: on\n" in viewed
    assert "- tool staging__push: needs approval\n" in viewed
    assert "waits until a decider of this chat approves or declines it" in viewed
    assert "- tool staging__purge: off (denied in this chat)\n" in viewed
    assert "- tool gone__tool: not on this hub\n" in viewed
    assert "Some are not available here: do not pretend to run those steps." in viewed
    plain = _view(_context(team_chat), {"name": "deploy-staging", "path": "SKILL.md"})
    assert plain == viewed


def page(client, slug, chat=None):
    url = f"/skills/{slug}/" + (f"?chat={quote(chat.chat_key, safe='')}" if chat else "")
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_the_skill_page_shows_the_tools_for_a_chat_its_viewer_may_read(
    team_chat, staging, reviewer_author, owner, member, outsider, make_person
):
    skill_create(name="deploy-staging", content=skill_md(metadata=NEEDS), author=reviewer_author)
    turn_on(team_chat, staging)
    shown = page(login(member), "deploy-staging")
    assert "Tools it needs" in shown and "choose a chat" in shown
    assert f'<option value="{team_chat.chat_key}"' in shown  # his chats to choose from
    checked = page(login(member), "deploy-staging", team_chat)
    row = '<tr class="tool-{}"><td><code>{}</code></td><td>tool</td><td>{}</td></tr>'
    assert row.format("on", "staging__build", "on") in checked
    assert row.format("ask", "staging__push", "needs approval") in checked
    assert row.format("on", "memory", "on (built in)") in checked
    assert "in Team room" in checked

    stranger = make_person("gina")
    theirs, _ = chat_get_or_create(channel="web", chat_id="gina-room", title="Gina's room")
    chat_member_ensure(chat=theirs, person=stranger, role=ChatMember.Role.OWNER)
    for person in (outsider, stranger):
        refused = page(login(person), "deploy-staging", team_chat)
        assert "That is not a chat you can see." in refused
        assert (
            "Team room" not in refused
            and "tool-on" not in refused
            and "needs approval" not in refused
        )
        assert f'value="{team_chat.chat_key}"' not in refused
    # A chat key that does not exist answers exactly as one that is not theirs.
    client = login(outsider)
    missing = client.get("/skills/deploy-staging/?chat=web:no-such-room").content.decode()
    not_theirs = client.get(f"/skills/deploy-staging/?chat={team_chat.chat_key}").content.decode()
    assert tools_section(missing) == tools_section(not_theirs)


def tools_section(html: str) -> str:
    start = html.index('<section class="skill-section" aria-labelledby="tools-title"')
    return html[start : html.index("</section>", start)]


def test_a_skill_that_names_no_tools_has_no_tools_section(reviewer_author, member):
    skill_create(name="plain", content=skill_md(name="plain"), author=reviewer_author)
    assert "Tools it needs" not in page(login(member), "plain")


def test_a_hermes_skill_imported_names_its_tools_and_exports_them_unchanged(tmp_path):
    import io

    from django.core.management import call_command

    text = (
        "---\nname: ship-it\ndescription: Ship a release.\nmetadata:\n  hermes:\n"
        "    requires_tools: [staging__build_image]\n    requires_toolsets: [terminal]\n"
        "allowed-tools: Bash(git:*) Read\n---\n# Ship it\n\n1. Build.\n"
    )
    (tmp_path / "in" / "ops" / "ship-it").mkdir(parents=True)
    (tmp_path / "in" / "ops" / "ship-it" / "SKILL.md").write_text(text)
    call_command("import_skills", str(tmp_path / "in"), stdout=io.StringIO())
    skill = Skill.objects.get(slug="ship-it")
    assert skill.required_tools == {"tools": ["staging__build_image"], "toolsets": ["terminal"]}
    # `allowed-tools` is kept as data, never read as what the skill needs or may run.
    assert skill.current_version.front_matter["allowed-tools"] == "Bash(git:*) Read"
    call_command("export_skills", str(tmp_path / "out"), stdout=io.StringIO())
    assert (tmp_path / "out" / "ops" / "ship-it" / "SKILL.md").read_text() == text


def test_the_migration_fills_in_what_existing_skills_already_named(reviewer_author):
    import importlib

    from django.apps import apps

    skill_create(name="deploy-staging", content=skill_md(metadata=NEEDS), author=reviewer_author)
    skill_create(name="plain", content=skill_md(name="plain"), author=reviewer_author)
    Skill.objects.update(required_tools={})  # as before the field existed
    migration = importlib.import_module("skills.migrations.0008_skill_required_tools")
    migration.copy_requirements(apps, None)
    assert dict(Skill.objects.values_list("slug", "required_tools")) == {
        "deploy-staging": {"tools": ["staging__build", "staging__push", "memory"]},
        "plain": {},
    }
