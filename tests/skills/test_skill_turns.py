"""Skills through the engine: the fake model issues real tool calls over HTTP, and what it
sees in later requests is the proof of what reached the prompt and the tool results."""

import pytest

from chats.agent.turns import message_received
from chats.models import Turn
from chats.services import message_ingest
from skills.models import Skill, SkillEvent, SkillUsage
from skills.selectors import skill_usage
from tests.fakes import openai_server as fake_openai
from tests.skills.conftest import HOSTILE
from tests.turns import run, system_prompt

pytestmark = pytest.mark.django_db(transaction=True)

SKILL = """---
name: deploy-staging
description: How to deploy the web app to staging, and check it.
---
# Deploy to staging

1. Build the image:
    make image
2. Ship it:
    deploy --env "staging" --wait
3. Check the health page.
"""


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0)
        yield server


def say(text, *, chat_id="1", user="10", name="Alice", kind="dm"):
    result = message_ingest(
        channel="telegram",
        chat_id=chat_id,
        user_id=user,
        user_name=name,
        text=text,
        chat_kind=kind,
    )
    return message_received(result, enqueue=False)


def tool_results(request) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m.get("tool_call_id")}


def call(call_id, tool, **arguments):
    return fake_openai.tool_calls([(call_id, tool, arguments)])


def manage(call_id, **arguments):
    return call(call_id, "skill_manage", name="deploy-staging", **arguments)


def test_create_index_view_patch_and_every_refusal_through_the_engine(fake):
    fake.script(
        manage("c1", action="create", content=SKILL, category="ops"),
        fake_openai.text("Saved the deploy procedure."),
    )
    run(say("save how we deploy to staging"))
    first = fake.requests[0]
    assert "## Skills" not in system_prompt(first)  # no skills yet: no index at all
    assert {"skills_list", "skill_view", "skill_manage"} <= {
        tool["function"]["name"] for tool in first["tools"]
    }
    assert "Applied: deploy-staging is now version 1" in tool_results(fake.requests[-1])["c1"]

    # The next turn's system prompt lists it; the model loads it on demand.
    fake.script(
        call("v1", "skill_view", name="deploy-staging"),
        fake_openai.text("Follow the steps."),
    )
    viewing = run(say("how do we deploy?"))
    index_request, view_result_request = fake.requests[-2:]
    assert (
        "- deploy-staging [ops]: How to deploy the web app to staging, and check it."
        in system_prompt(index_request)
    )
    assert SKILL.split("---\n")[-1] not in system_prompt(index_request)  # the body is not
    viewed = tool_results(view_result_request)["v1"]
    # Created in the person's own DM: their personal skill, and the view says so.
    assert viewed.startswith(
        "Skill deploy-staging (version 1, category ops, personal: only in its owner's own "
        "private chats):"
    )
    assert 'deploy --env "staging" --wait' in viewed
    report = Turn.objects.get(pk=viewing.pk).prompt_report
    skills_report = next(s for s in report["sections"] if s["name"] == "skills")
    assert skills_report["status"] == "included" and skills_report["tokens"] > 0
    usage = skill_usage(Skill.objects.get())
    assert [(row["turn"].pk, row["version"], row["outcome"]) for row in usage] == [
        (viewing.pk, 1, "completed")
    ]

    # Patch quoted with other indentation and typographic quotes: applies.
    # Then an ambiguous patch, a patch breaking the front matter and hostile content.
    fake.script(
        manage(
            "p1",
            action="patch",
            base_version=1,
            old_string="  deploy --env \u201cstaging\u201d --wait",
            new_string="  deploy --env \u201cstaging\u201d --wait --timeout 600",
        ),
        manage("p2", action="patch", old_string="staging", new_string="prod"),
        manage(
            "p3",
            action="patch",
            old_string="name: deploy-staging\n",
            new_string="name: deploy-staging\ndescription: [\n",
        ),
        manage(
            "p4",
            action="patch",
            old_string="3. Check the health page.",
            new_string=f"3. Check the health page. {HOSTILE}",
        ),
        fake_openai.text("Updated."),
    )
    run(say("the deploy needs a 600 s timeout"))
    results = tool_results(fake.requests[-1])
    assert (
        "Applied: deploy-staging is now version 2 (patch, matched unicode-normalised)"
        in (results["p1"])
    )
    assert "matches 4 places (exact match)" in results["p2"] and "replace_all" in results["p2"]
    assert "the patched SKILL.md would be invalid" in results["p3"]
    assert "not valid YAML" in results["p3"]
    assert "prompt_injection" in results["p4"] and "stays at version 2" in results["p4"]

    skill = Skill.objects.get()
    assert skill.current_version.number == 2
    assert '    deploy --env "staging" --wait' not in skill.current_version.skill_md
    assert (
        "    deploy --env \u201cstaging\u201d --wait --timeout 600\n"
        in skill.current_version.skill_md
    )
    assert HOSTILE not in skill.current_version.skill_md
    blocked = skill.events.get(kind=SkillEvent.Kind.BLOCKED)
    assert blocked.detail["action"] == "patch" and blocked.turn_id is not None
    assert list(skill.events.values_list("kind", flat=True)) == [
        SkillEvent.Kind.CREATE,
        SkillEvent.Kind.PATCH,
        SkillEvent.Kind.BLOCKED,
    ]


def test_in_a_group_the_change_waits_and_the_index_stays_unchanged(fake):
    fake.script(
        manage("c1", action="create", content=SKILL),
        fake_openai.text("Proposed."),
    )
    run(say("save our deploy procedure", chat_id="-100", kind="group"))
    assert "a skill reviewer decides" in tool_results(fake.requests[-1])["c1"]
    assert not Skill.objects.exists()
    fake.script(fake_openai.text("ok"))
    run(say("anything?", chat_id="-100", kind="group"))
    assert "deploy-staging" not in system_prompt(fake.requests[-1])


def test_skills_list_and_a_supporting_file(fake):
    fake.script(
        manage("c1", action="create", content=SKILL),
        manage(
            "w1",
            action="write_file",
            file_path="references/hosts.md",
            file_content="staging-1.internal\n",
        ),
        call("l1", "skills_list"),
        call("v1", "skill_view", name="deploy-staging", path="references/hosts.md"),
        call("v2", "skill_view", name="deploy-staging", path="../../etc/passwd"),
        call("x1", "skill_view", path="references/hosts.md"),  # no name: a failed call
        fake_openai.text("done"),
    )
    turn = run(say("save and check"))
    results = tool_results(fake.requests[-1])
    assert "now version 2 (write_file)" in results["w1"]
    assert results["l1"].startswith("1 skill; showing 1–1.")
    assert "- deploy-staging (personal): How to deploy" in results["l1"]
    assert results["v1"].endswith("staging-1.internal\n")
    assert "leaves the skill" in results["v2"]
    assert "invalid arguments" in results["x1"]
    assert list(SkillUsage.objects.values_list("path", flat=True)) == ["references/hosts.md"]
    [used] = skill_usage(Skill.objects.get())
    assert (used["turn"].pk, used["outcome"], used["tool_errors"]) == (turn.pk, "completed", True)
