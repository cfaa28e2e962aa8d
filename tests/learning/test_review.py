"""The review agent end to end: a real turn crosses the counter, the queued review runs as
the Celery task would (called here), and the fake model scripts what the review does."""

from decimal import Decimal

import pytest

from chats.agent.registry import Tool, registry
from chats.models import Chat, Message, Turn
from chats.services import actor_get_or_create
from learning.models import Review
from learning.tasks import run_review
from memory.models import MemoryEntry
from memory.reviews import memory_review
from memory.services import ReviewNotAllowed
from skills.models import Skill, SkillProposal, SkillUsage, Via
from skills.services import Author, skill_create
from tests.fakes import openai_server as fake_openai
from tests.learning.helpers import calls, chat_turn, counters
from usage.models import ModelPrice, UsageRecord

pytestmark = pytest.mark.django_db(transaction=True)

COMMAND = Author(via=Via.COMMAND)
SKILL_MD = (
    "---\nname: flask-k8s-deploy\ndescription: Deploy a Flask app to Kubernetes.\n---\n\n"
    "1. Build the image.\n2. kubectl apply -f deploy.yaml\n3. Check the rollout.\n"
)


def tool_names(request) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools") or []}


def tool_result(request, call_id) -> str:
    return next(m["content"] for m in request["messages"] if m.get("tool_call_id") == call_id)


def reviewed(fake, queued, *replies) -> Review:
    """Run the review queued last with the fake model answering `replies`."""
    fake.script(*replies)
    run_review(queued[-1])
    return Review.objects.get(pk=queued[-1])


@pytest.fixture
def every_turn(settings):
    """A memory review after every user turn."""
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 1
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 0


@pytest.fixture
def shell_tool():
    """A test-only tool provider standing in for a dangerous tool: records its calls."""
    ran = []

    class Provider:
        def tools(self):
            return [
                Tool(
                    name="shell",
                    description="Run a shell command.",
                    parameters={"type": "object", "properties": {"cmd": {"type": "string"}}},
                    handler=lambda context, arguments: ran.append(arguments) or "ran",
                )
            ]

    provider = Provider()
    registry.tool_providers.append(provider)
    yield ran
    registry.tool_providers.remove(provider)


def test_the_review_may_call_only_memory_tools_any_other_call_is_refused(
    fake, queued, every_turn, shell_tool
):
    chat_turn(fake, "I prefer tea over coffee")
    assert "shell" in tool_names(fake.requests[0])  # turns are offered it
    before = len(fake.requests)
    review = reviewed(
        fake,
        queued,
        fake_openai.tool_calls(
            [
                ("r1", "shell", {"cmd": "rm -rf /"}),
                (
                    "r2",
                    "memory",
                    {
                        "action": "add",
                        "scope": "user",
                        "about": "Alice",
                        "content": "Prefers tea over coffee.",
                    },
                ),
            ]
        ),
        fake_openai.text("Proposed: Alice prefers tea."),
    )
    first, second = fake.requests[before:]
    assert tool_names(first) == {"memory"}  # memory focus: the memory tool only
    assert shell_tool == []  # never run
    assert "refused" in tool_result(second, "r1") and "nothing was run" in tool_result(second, "r1")
    assert review.status == Review.Status.DONE
    assert review.tool_calls == 2 and review.refused_calls == 1
    assert [step["refused"] for step in review.steps] == [True, False]
    entry = MemoryEntry.objects.get()
    assert entry.status == MemoryEntry.Status.PENDING and entry.review == review


def test_the_review_leaves_the_history_untouched_and_starts_no_review(fake, queued, every_turn):
    chat_turn(fake, "We deploy on Tuesdays")
    chat = Chat.objects.get()
    messages = list(Message.objects.values_list("id", "text"))
    counted = counters()
    review = reviewed(
        fake,
        queued,
        fake_openai.tool_calls(
            [("r1", "memory", {"action": "add", "scope": "team", "content": "Deploys: Tuesday."})]
        ),
        fake_openai.text("Proposed one team fact."),
    )
    assert review.status == Review.Status.DONE
    assert list(Message.objects.values_list("id", "text")) == messages  # nothing appended
    assert counters() == counted  # its memory call reset nothing, counted nothing
    assert Review.objects.count() == 1 and len(queued) == 1  # it started no review
    assert Turn.objects.filter(chat=chat).count() == 1


def test_review_writes_wait_for_approval_even_where_the_persons_own_would_apply(
    fake, queued, settings, make_person
):
    settings.MEMORY_APPROVAL_TEAM = "auto"  # a turn's team fact would apply at once
    alice = make_person("alice")
    actor_get_or_create(channel="telegram", user_id="10", display_name="Alice", person=alice)
    # Control: in her own DM, her explicit request applies at once in a normal turn.
    chat_turn(
        fake,
        "remember that I prefer green tea",
        calls("memory", {"action": "add", "scope": "user", "content": "Prefers green tea."}),
        "Saved.",
    )
    assert MemoryEntry.objects.get().status == MemoryEntry.Status.ACTIVE
    skill_create(name="tea-notes", content=SKILL_MD.replace("flask-k8s-deploy", "tea-notes"),
                 author=COMMAND)  # fmt: skip

    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 1
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 1
    chat_turn(
        fake,
        "remember that I drink it without sugar; and deploy my flask app",
        calls("skills_list", {}),
        "Deployed.",
    )
    review = Review.objects.get()
    assert review.focus == Review.Focus.COMBINED
    reviewed(
        fake,
        queued,
        fake_openai.tool_calls(
            [
                (
                    "r1",
                    "memory",
                    {
                        "action": "add",
                        "scope": "user",
                        "about": "Alice",
                        "content": "Drinks green tea without sugar.",
                    },
                ),
                (
                    "r2",
                    "memory",
                    {
                        "action": "add",
                        "scope": "team",
                        "content": "Flask apps are deployed to Kubernetes.",
                    },
                ),
                (
                    "r3",
                    "skill_manage",
                    {"action": "create", "name": "flask-k8s-deploy", "content": SKILL_MD},
                ),
                (
                    "r4",
                    "skill_manage",
                    {
                        "action": "patch",
                        "name": "tea-notes",
                        "old_string": "Check the rollout.",
                        "new_string": "Check the rollout and the logs.",
                    },
                ),
            ]
        ),
        fake_openai.text("Proposed two facts, a skill and a patch."),
    )
    review.refresh_from_db()
    assert review.status == Review.Status.DONE, review.error
    assert not any(step["is_error"] for step in review.steps), review.steps
    assert all("Proposed" in step["result"] for step in review.steps), review.steps
    proposed = MemoryEntry.objects.filter(review=review)
    assert proposed.count() == 2
    assert set(proposed.values_list("status", flat=True)) == {MemoryEntry.Status.PENDING}
    about_alice = proposed.get(book__scope="user")
    assert about_alice.book.person == alice and about_alice.visibility == "private"
    proposals = SkillProposal.objects.filter(review=review)
    assert set(proposals.values_list("action", "status")) == {
        ("create", SkillProposal.Status.PENDING),
        ("patch", SkillProposal.Status.PENDING),
    }
    assert not Skill.objects.filter(slug="flask-k8s-deploy").exists()
    assert Skill.objects.get(slug="tea-notes").current_version.number == 1


def test_a_fact_bob_states_in_a_group_is_a_proposal_about_bob_that_only_bob_approves(
    fake, queued, settings, make_person
):
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 2
    alice, bob = make_person("alice"), make_person("bob")
    actor_get_or_create(channel="telegram", user_id="10", display_name="Alice", person=alice)
    actor_get_or_create(channel="telegram", user_id="20", display_name="Bob", person=bob)
    group = {"chat_id": "-100", "kind": "group"}
    chat_turn(
        fake,
        "I'm on call for the database this week and I only use vim",
        user="20",
        name="Bob",
        **group,
    )
    chat_turn(fake, "Bob, can you check the replica lag?", user="10", name="Alice", **group)
    before = len(fake.requests)
    review = reviewed(
        fake,
        queued,
        fake_openai.tool_calls(
            [
                ("r1", "memory", {"action": "add", "scope": "user", "content": "Uses vim."}),
                (
                    "r2",
                    "memory",
                    {
                        "action": "add",
                        "scope": "user",
                        "about": "Bob",
                        "content": "Uses vim as his only editor.",
                    },
                ),
            ]
        ),
        fake_openai.text("Proposed a fact about Bob."),
    )
    first, second = fake.requests[before:]
    snapshot = first["messages"][1]["content"]
    assert "[Bob] I'm on call for the database" in snapshot
    assert "[Alice] Bob, can you check" in snapshot
    assert "name the person" in tool_result(second, "r1")  # no `about`: refused, not Alice's
    entry = MemoryEntry.objects.get()
    assert entry.review == review and entry.book.person == bob
    assert entry.status == MemoryEntry.Status.PENDING and entry.visibility == "shared"

    with pytest.raises(ReviewNotAllowed):
        memory_review(entry_id=entry.pk, decision="approve", revision=entry.revision, person=alice)
    entry.refresh_from_db()
    assert entry.status == MemoryEntry.Status.PENDING
    memory_review(entry_id=entry.pk, decision="approve", revision=entry.revision, person=bob)
    entry.refresh_from_db()
    assert entry.status == MemoryEntry.Status.ACTIVE


def test_a_dead_model_marks_the_review_failed_and_the_chat_is_unaffected(fake, queued, every_turn):
    chat_turn(fake, "hello")
    messages = Message.objects.count()
    review = reviewed(fake, queued, fake_openai.error(503))
    assert review.status == Review.Status.FAILED
    assert review.error and review.finished_at is not None and review.duration_ms is not None
    assert Message.objects.count() == messages
    assert chat_turn(fake, "still there?").status == Turn.Status.COMPLETED


def test_the_review_records_model_tokens_duration_outcome_and_cost(
    fake, queued, every_turn, settings
):
    chat_turn(fake, "hello")
    review = reviewed(fake, queued, fake_openai.text("Nothing to save."))
    assert review.status == Review.Status.DONE and review.outcome == "Nothing to save."
    assert review.model == fake.model and review.iterations == 1
    assert review.prompt_tokens > 0 and review.completion_tokens > 0
    assert review.duration_ms is not None and review.snapshot_tokens > 0
    assert review.cost is None  # no price configured, none reported

    # The cost comes from the model's price in the usage app (docs/USAGE.md).
    ModelPrice.objects.create(
        model=fake.model, input_per_million=Decimal("2.50"), output_per_million=Decimal("10")
    )
    chat_turn(fake, "again")
    priced = reviewed(fake, queued, fake_openai.text("Nothing to save."))
    expected = (priced.prompt_tokens * Decimal("2.5") + priced.completion_tokens * 10) / 10**6
    assert priced.cost == expected.quantize(Decimal("0.000001")) and priced.cost > 0
    record = UsageRecord.objects.get(review=priced)
    assert record.kind == "review" and record.prompt_tokens == priced.prompt_tokens
    assert record.cost == expected and record.calls == priced.iterations


def test_reviews_run_on_review_llm_model_when_set(fake, queued, every_turn, settings):
    settings.REVIEW_LLM_MODEL = "small-reviewer"
    chat_turn(fake, "hello")
    review = reviewed(fake, queued, fake_openai.text("Nothing to save."))
    assert fake.requests[0]["model"] == fake.model
    assert fake.requests[-1]["model"] == "small-reviewer" == review.model


def test_the_review_stops_after_its_iteration_budget(fake, queued, settings):
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 0
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 1
    settings.LEARNING_REVIEW_MAX_ITERATIONS = 3
    chat_turn(fake, "work", calls("skills_list", {}), "done")
    before = len(fake.requests)
    review = reviewed(fake, queued, *[calls("skills_list", {}, prefix=f"r{n}") for n in range(5)])
    assert len(fake.requests) - before == 3
    assert review.iterations == 3 and review.tool_calls == 3
    assert review.status == Review.Status.DONE and "Stopped after 3 steps" in review.outcome
    assert tool_names(fake.requests[-1]) == {"skills_list", "skill_view", "skill_manage"}


def test_a_skill_the_review_views_is_not_counted_as_used(fake, queued, settings):
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 1
    skill_create(name="flask-k8s-deploy", content=SKILL_MD, author=COMMAND)
    chat_turn(fake, "deploy", calls("skill_view", {"name": "flask-k8s-deploy"}), "done")
    assert SkillUsage.objects.count() == 1  # the turn's own use
    review = reviewed(
        fake, queued, calls("skill_view", {"name": "flask-k8s-deploy"}), "Nothing to save."
    )
    assert review.status == Review.Status.DONE and review.tool_calls == 1
    assert SkillUsage.objects.count() == 1


def test_a_started_review_never_runs_twice(fake, queued, every_turn):
    chat_turn(fake, "hello")
    review = reviewed(fake, queued, fake_openai.text("Nothing to save."))
    requests = len(fake.requests)
    run_review(review.pk)  # a redelivered task
    assert len(fake.requests) == requests
    assert Review.objects.get(pk=review.pk).finished_at == review.finished_at


def test_a_memory_review_reads_peoples_words_past_long_tool_output(fake, queued, settings):
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 2
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 0
    settings.LEARNING_SNAPSHOT_TOKENS = 1200

    class Logs:
        def tools(self):
            return [
                Tool(
                    name="read_logs",
                    description="Read the deploy logs.",
                    parameters={"type": "object", "properties": {}},
                    handler=lambda context, arguments: "INFO rollout step ok " * 150,
                )
            ]

    provider = Logs()
    registry.tool_providers.append(provider)
    try:
        chat_turn(fake, "I am Alice and I deploy from the release branch.")
        chat_turn(fake, "why is it slow?", calls("read_logs", {}, count=5), "It waits on pulls.")
    finally:
        registry.tool_providers.remove(provider)
    review = Review.objects.get()
    assert review.focus == Review.Focus.MEMORY
    before = len(fake.requests)
    reviewed(fake, queued, fake_openai.text("Nothing to save."))
    snapshot = fake.requests[before]["messages"][1]["content"]
    assert "[Alice] I am Alice and I deploy from the release branch." in snapshot
    assert "INFO rollout step ok" in snapshot  # tool output is still there, cut short
