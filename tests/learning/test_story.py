"""The self-evolution story end to end (seed 002, section 6; issue #13): three deploys by one
person, with real turns, a real background review and a real approval in between.

1. Cold start in Alice's Telegram DM: the deploy takes 8 tool calls and hits ErrImagePull
   (the tag was never pushed) before it works. The skill counter crosses, a review runs,
   reads the session and proposes a skill; it waits for a skill reviewer, who approves it.
2. A fresh context (`/new`): the skills index lists the skill, the model loads it and
   follows it, learns the Django health path the hard way and patches the skill, which
   applies at once (her own DM, SKILLS_APPROVAL=own_chat).
3. Her terminal: the patched skill makes the deploy 6 calls with no error.

The cluster is a real MCP server (`tests/learning/story_server.py`, built with the SDK's
`MCPServer`, over streamable HTTP on loopback), added to the hub as the tool server
`staging` and turned on by Alice in each of her chats through the toolservers services:
the model calls `staging__build_image` and the rest, each call leaves a `ToolCall` audit
row, and the skill the review writes names the tools it used
(`metadata.hermes.requires_tools`), so its page and the index say where they are on.

The models are `tests.learning.story_tools.operator_model` / `reviewer_model`: they decide
each reply from the request the product sent, so the assertions below are on what the
product put in each request, stored, and held for approval.
"""

import pytest

from chats.agent.registry import TurnContext
from chats.models import Chat, Message, Turn
from chats.services import actor_get_or_create, chat_reset
from learning.models import Review
from learning.review import review_run
from skills.models import Skill, SkillEvent, SkillProposal, SkillUsage
from skills.prompt import skills_section
from skills.reviews import skill_proposal_decide
from skills.services import SkillNotAllowed
from tests.learning import story_tools as story
from tests.learning.helpers import calls, chat_turn, counters, run, say
from tests.learning.story_server import Staging, staging_server, tool_name, turn_on
from tests.turns import system_prompt
from toolservers.models import ToolCall

pytestmark = pytest.mark.django_db(transaction=True)

SKILL = story.SKILL_NAME


def tool_result(request, call_id) -> str:
    return next(m["content"] for m in request["messages"] if m.get("tool_call_id") == call_id)


def deploy(fake, staging: Staging, app, tag, **where) -> tuple[Turn, list[dict]]:
    """Alice asks for a deploy; the turn runs here. In a chat where the staging tools are
    not on yet, Alice (its one member, so its decider) turns them on first. The turn and
    the requests it made."""
    before = len(fake.requests)
    asked = say(story.deploy_request(app, tag), name="Alice", **where)
    if not asked.chat.toolsets.filter(server=staging.server).exists():
        turn_on(staging, asked.chat, by=where["person"])
    turn = run(asked)
    assert turn.status == Turn.Status.COMPLETED, turn.error
    return turn, fake.requests[before:]


def audited(turn) -> list[tuple[str, str, bool]]:
    """(tool, decision, failed) of the turn's audited tool-server calls, in order."""
    rows = ToolCall.objects.filter(turn=turn).order_by("created_at", "id")
    return [(row.tool, row.decision, bool(row.error)) for row in rows]


@pytest.fixture
def alice(make_person):
    person = make_person("alice")
    actor_get_or_create(channel="telegram", user_id="10", display_name="Alice", person=person)
    return person


@pytest.fixture
def staging(settings, fake, queued):
    """The staging cluster's MCP server running and added to the hub (on in no chat yet),
    the operator answering, and a skill review after 8 tool-loop iterations (the cold-start
    deploy is 8; the default is 10)."""
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 8
    fake.default = story.operator_model
    with staging_server() as running:
        yield running


COLD_START = [
    "build_image", "kubectl_apply", "kubectl_rollout_status", "kubectl_get_pods",
    "push_image", "kubectl_apply", "kubectl_rollout_status", "http_check",
]  # fmt: skip
USED = [tool_name(name) for name in dict.fromkeys(COLD_START)]  # the tools, in first use


def test_three_deploys_a_review_learns_the_pitfall_a_patch_refines_it_the_third_is_clean(
    fake, queued, staging, alice, make_person, capsys
):
    counts = {}
    cluster = staging.cluster

    # --- Session 1: the cold start in Alice's DM -------------------------------------
    first, requests = deploy(fake, staging, "shop", "1.4.0", person=alice)
    assert "## Skills" not in system_prompt(requests[0])  # nothing learnt yet
    offered = story.offered_tools(requests[0])
    assert {"staging__build_image", "staging__kubectl_apply", "skill_manage"} <= offered
    assert "build_image" not in offered  # the cluster is the MCP server's, nothing else
    counts[1] = story.turn_tool_counts(first)
    assert counts[1][0] >= 8 and counts[1][1] >= 1
    failed = Message.objects.get(chat=first.chat, role=Message.Role.TOOL, metadata__is_error=True)
    assert failed.metadata["tool_name"] == "staging__kubectl_rollout_status"
    assert "ErrImagePull" in failed.text
    assert cluster.deployments["shop"].ready  # it was overcome: pushed, applied again
    # Every call went to the MCP server and left its audit row, allowed by the chat's policy.
    assert [name for name, _ in cluster.calls] == COLD_START
    assert audited(first) == [
        (name, "allowed", name == "kubectl_rollout_status" and n == 2)
        for n, name in enumerate(COLD_START)
    ]
    assert set(ToolCall.objects.values_list("chat", "person", "server_slug")) == {
        (first.chat_id, alice.pk, "staging")
    }

    # The skill counter crossed: one review, queued on its own queue, not run by the turn.
    review = Review.objects.get()
    assert queued == [review.pk]
    assert review.focus == Review.Focus.SKILLS and review.status == Review.Status.QUEUED
    assert review.turn == first and review.trigger["tool_iterations"] == counts[1][0]
    history = list(Message.objects.order_by("id").values_list("id", "role", "text"))
    counted = counters()

    # --- The background review, as the review worker runs it -------------------------
    fake.default = story.reviewer_model
    before = len(fake.requests)
    review_run(review_id=review.pk, worker="test-reviews")
    reviewing = fake.requests[before:]
    review.refresh_from_db()
    assert review.status == Review.Status.DONE, review.error
    assert len(reviewing) == 3 and review.iterations == 3

    snapshot = reviewing[0]["messages"][1]["content"]
    assert "[Alice] Please deploy shop 1.4.0 to staging" in snapshot  # authorship
    assert "made 8 tool call(s) here, 1 of them failed" in snapshot
    for name in ("build_image", "kubectl_apply", "kubectl_get_pods", "push_image", "http_check"):
        assert f"(called staging__{name}(" in snapshot, name
    assert "(tool staging__kubectl_rollout_status failed: " in snapshot
    assert "ErrImagePull" in snapshot
    assert "manifest unknown" in snapshot  # what the pods said, the clue to the fix
    # Offered only the skills tools: not the cluster's, not memory.
    assert story.offered_tools(reviewing[0]) == {"skills_list", "skill_view", "skill_manage"}
    assert tool_result(reviewing[1], "review-1").startswith("No skills yet.")
    assert "a skill reviewer decides, nothing changed yet" in tool_result(reviewing[2], "review-2")
    assert [step["tool"] for step in review.steps] == ["skills_list", "skill_manage"]
    assert review.prompt_tokens > 0 and review.completion_tokens > 0

    # Its skill waits for a reviewer, even in Alice's own DM where her own change applies.
    proposal = SkillProposal.objects.get()
    assert proposal.review == review and proposal.status == SkillProposal.Status.PENDING
    assert (proposal.action, proposal.slug, proposal.author_person) == ("create", SKILL, alice)
    assert "Push the image before kubectl apply" in proposal.skill_md
    # The skill names the tools the procedure used, as the model sees them.
    assert proposal.front_matter["metadata"]["hermes"]["requires_tools"] == USED
    assert not Skill.objects.exists()
    # The review wrote nothing to the chat, counted nothing, started no review.
    assert list(Message.objects.order_by("id").values_list("id", "role", "text")) == history
    assert counters() == counted and Review.objects.count() == 1 and queued == [review.pk]
    assert Turn.objects.count() == 1

    # Alice may not approve it; a skill reviewer does, as shown (a new skill: no version).
    with pytest.raises(SkillNotAllowed):
        skill_proposal_decide(
            proposal_id=proposal.pk, decision="approve", shown_version=None, person=alice
        )
    stella = make_person("stella", is_staff=True)
    skill_proposal_decide(
        proposal_id=proposal.pk, decision="approve", shown_version=None, person=stella
    )
    skill = Skill.objects.get(slug=SKILL)
    assert skill.current_version.number == 1 and skill.current_version.author_person == alice
    assert skill.required_tools == {"tools": USED}
    approved = SkillEvent.objects.get(kind=SkillEvent.Kind.APPROVED)
    assert approved.person == stella and approved.proposal == proposal

    # --- Session 2: a fresh context (/new) in the same DM -----------------------------
    dm = Chat.objects.get(channel="telegram", external_id="1")
    chat_reset(chat=dm, actor=first.trigger.actor)
    fake.default = story.operator_model
    second, requests = deploy(fake, staging, "billing", "2.0.1", person=alice)
    index = system_prompt(requests[0])
    assert f"- {SKILL} [devops]: Deploy an app version to the staging" in index
    assert "Push the image before" not in index  # the index lists it, the body is loaded
    assert not any("shop" in str(m.get("content")) for m in requests[0]["messages"][1:])
    viewed = tool_result(requests[1], "billing-2.0.1-1")
    assert viewed.startswith(f"Skill {SKILL} (version 1, category devops):")
    assert "Push the image before kubectl apply" in viewed
    # skill_view says the tools it names are on here (Alice allowed them in this chat).
    assert (
        "Tools this skill names, in this chat:\n" + "\n".join(f"- tool {name}: on" for name in USED)
        in viewed
    )
    assert "not on in this chat" not in index  # its tools are on here
    patched = tool_result(requests[-1], "billing-2.0.1-8")
    # A team skill: Alice's refinement waits for a skill reviewer, even in her own DM.
    assert patched.startswith("Proposed as change #") and "based on version 1" in patched
    refinement = SkillProposal.objects.get(status=SkillProposal.Status.PENDING)
    skill_proposal_decide(
        proposal_id=refinement.pk, decision="approve", shown_version=1, person=stella
    )
    skill.refresh_from_db()
    assert skill.current_version.number == 2
    assert "Django apps answer on `/healthz/`" in skill.current_version.skill_md
    assert skill.current_version.source_turn == second
    counts[2] = story.turn_tool_counts(second)
    # Its own skill_manage reset the skill counter: the turn did that work, no review.
    assert counters()[1] == 0 and Review.objects.count() == 1

    # --- Session 3: Alice's terminal --------------------------------------------------
    third, requests = deploy(
        fake, staging, "invoices", "0.3.0", channel="cli", chat_id="alice-laptop",
        user="alice", kind="cli", person=alice,
    )  # fmt: skip
    assert f"- {SKILL} [devops]: " in system_prompt(requests[0])
    viewed = tool_result(requests[1], "invoices-0.3.0-1")
    assert viewed.startswith(f"Skill {SKILL} (version 2, category devops):")
    assert "Django apps answer on `/healthz/`" in viewed
    counts[3] = story.turn_tool_counts(third)
    assert cluster.deployments["invoices"].ready
    assert Message.objects.get(pk=third.reply_id).text.startswith(
        "Deployed registry.local/invoices:0.3.0 to staging"
    )
    clean = ["build_image", "push_image", "kubectl_apply", "kubectl_rollout_status", "http_check"]
    assert audited(third) == [(name, "allowed", False) for name in clean]
    assert [name for name, _ in cluster.calls[-5:]] == clean
    assert ToolCall.objects.filter(chat=third.chat).count() == 5

    # In a chat where nobody turned the staging tools on, the index says so, cheaply.
    group = say("Could someone deploy shop 1.5.0?", chat_id="-100", kind="group", person=alice)
    elsewhere = str(skills_section.render(TurnContext(chat=group.chat, trigger=group.trigger)))
    assert f"- {SKILL} [devops]: " in elsewhere
    assert "(some of its tools are not on in this chat: skill_view says which)" in elsewhere
    assert set(SkillUsage.objects.values_list("turn", "version__number")) == {
        (second.pk, 1),
        (third.pk, 2),
    }
    assert Review.objects.count() == 1 and queued == [review.pk]

    with capsys.disabled():
        print("\nsession  tool calls  errors")
        for session, (calls, errors) in counts.items():
            print(f"{session:>7}  {calls:>10}  {errors:>6}")
    assert counts[3][0] < counts[1][0]
    assert counts[3][1] == 0
    assert counts == {1: (8, 1), 2: (8, 1), 3: (6, 0)}


def test_without_a_review_the_same_deploy_repeats_the_cold_starts_errors(
    fake, queued, staging, alice, settings
):
    """The control: with skill reviews off nothing is learnt, so the later deploy is as
    long as the cold start, with its errors: the gain above is the review's."""
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 0
    deploy(fake, staging, "shop", "1.4.0", person=alice)
    third, requests = deploy(
        fake, staging, "invoices", "0.3.0", channel="cli", chat_id="alice-laptop",
        user="alice", kind="cli", person=alice,
    )  # fmt: skip
    assert not Review.objects.exists() and queued == []
    assert "## Skills" not in system_prompt(requests[0])
    assert story.turn_tool_counts(third) == (9, 2)  # ErrImagePull, then the health path


def test_a_memory_review_reads_every_turn_since_the_last_memory_review(fake, queued, settings):
    """Found by the story: a review used to start after the newest review of the chat of any
    focus, so a skills review (which cannot call the memory tool) hid the turns it read from
    the next memory review, and their facts were never offered to one."""
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 3
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 1
    chat_turn(fake, "I'm on the platform team and I deploy from the release branch.")
    chat_turn(fake, "list our skills", calls("skills_list", {}), "none yet")
    skills_review = Review.objects.get()
    assert skills_review.focus == Review.Focus.SKILLS  # it covers turns 1-2, skills tools only
    chat_turn(fake, "thanks")
    memory_review = Review.objects.exclude(pk=skills_review.pk).get()
    assert memory_review.focus == Review.Focus.MEMORY  # the 3rd user turn since none
    fake.script("Nothing to save.")
    before = len(fake.requests)
    review_run(review_id=memory_review.pk)
    snapshot = fake.requests[before]["messages"][1]["content"]
    assert "[Alice] thanks" in snapshot
    # The first turn's fact was only ever read by the skills review, which could not save it.
    assert "[Alice] I'm on the platform team" in snapshot
