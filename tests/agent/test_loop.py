"""The turn loop in-process against the fake OpenAI server over real HTTP and SSE."""

import json
import threading
import time

import pytest

from chats.agent.context import IDENTITY
from chats.agent.interrupts import request_interrupt
from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.registry import Tool, register_tool_provider, registry
from chats.agent.turns import Claim, message_received, turn_claim
from chats.models import Message, Turn
from chats.services import message_ingest
from tests.fakes import openai_server as fake_openai

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=2)
        yield server


def say(text, *, chat_id="room", user="u1", name="Ada", channel="api", **extra):
    result = message_ingest(
        channel=channel, chat_id=chat_id, user_id=user, user_name=name, text=text, **extra
    )
    return message_received(result, enqueue=False)


def run(turn, events=None):
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert claim.outcome is Claim.CLAIMED
    return run_claimed_turn(claim.turn, provider=get_provider(), on_event=events)


def test_a_turn_streams_stores_the_reply_and_records_usage(fake):
    fake.script(fake_openai.text("Hello there, Ada!"))
    seen = []
    turn = run(say("hi"), seen.append)
    assert turn.status == Turn.Status.COMPLETED
    reply = Message.objects.get(pk=turn.reply_id)
    assert reply.role == "assistant" and reply.text == "Hello there, Ada!"
    assert reply.metadata["turn"] == turn.pk
    assert turn.prompt_tokens > 0 and turn.completion_tokens > 0 and turn.latency_ms is not None
    assert turn.model == fake.model and turn.prompt_report["tokens"]["total"] > 0
    types = [e["type"] for e in seen]
    assert types[0] == "turn.started" and types[-1] == "turn.finished"
    assert "".join(e["text"] for e in seen if e["type"] == "turn.delta") == "Hello there, Ada!"
    # The prompt sent is the user's text, never an assembled prompt stored back.
    sent = fake.last_request["messages"]
    assert sent[0]["role"] == "system" and sent[-1] == {"role": "user", "content": "hi"}
    assert Message.objects.filter(role="user").get().text == "hi"


class _Probe:
    def __init__(self):
        self.calls = []

    def tools(self):
        def add(context, args):
            self.calls.append(args)
            return {"sum": args["a"] + args["b"]}

        def explode(context, args):
            raise RuntimeError("kaboom")

        schema = {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        }
        return [
            Tool("add", "Add two integers.", schema, add),
            Tool("explode", "Always fails.", {"type": "object"}, explode),
        ]


@pytest.fixture
def probe():
    provider = _Probe()
    register_tool_provider(provider)
    yield provider
    registry.tool_providers.remove(provider)


def test_tool_calls_run_and_their_results_go_back_to_the_model(fake, probe):
    fake.script(
        fake_openai.tool_calls(
            [
                ("call_1", "add", {"a": 2, "b": 40}),
                ("call_2", "add", '{"a": "two"}'),  # wrong type and a missing field
                ("call_3", "explode", {}),
                ("call_4", "add", '{"a": 1,'),  # invalid JSON
            ]
        ),
        fake_openai.text("The sum is 42."),
    )
    seen = []
    turn = run(say("what is 2 + 40?"), seen.append)
    assert turn.status == Turn.Status.COMPLETED and turn.iterations == 2
    assert probe.calls == [{"a": 2, "b": 40}]
    second = fake.requests[1]["messages"]
    results = {m["tool_call_id"]: m["content"] for m in second if m["role"] == "tool"}
    assert json.loads(results["call_1"]) == {"sum": 42}
    assert "invalid arguments" in results["call_2"]
    assert "RuntimeError: kaboom" in results["call_3"]
    assert "not valid JSON" in results["call_4"]
    assert any(m.get("tool_calls") for m in second if m["role"] == "assistant")
    assert {t["function"]["name"] for t in fake.requests[0]["tools"]} >= {"add", "current_time"}
    # Every step is stored: the tool-call step, four results, the reply.
    roles = list(Message.objects.order_by("id").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "tool", "tool", "tool", "assistant"]
    finished = [e for e in seen if e["type"] == "tool.finished"]
    assert [e["ok"] for e in finished] == [True, False, False, False]


def test_the_iteration_budget_ends_with_a_clear_message(fake, probe, settings):
    settings.AGENT_MAX_ITERATIONS = 3
    fake.default = fake_openai.tool_calls([("c", "add", {"a": 1, "b": 1})])
    turn = run(say("loop forever"))
    assert turn.status == Turn.Status.COMPLETED and turn.iterations == 3
    reply = Message.objects.get(pk=turn.reply_id)
    assert "stopped after 3 steps" in reply.text and reply.metadata["budget_exhausted"]
    assert len(fake.requests) == 3


def test_a_20kb_message_is_stored_whole_and_reaches_the_model_cut(fake, settings):
    settings.LLM_CONTEXT_TOKENS = 4000
    text = "Here is the log.\n" + ("line with some words 12345 " * 800) + "\nWhat failed?"
    assert len(text.encode()) > 20_000
    fake.context_window = 4000
    turn = run(say(text))
    assert turn.status == Turn.Status.COMPLETED
    assert Message.objects.get(role="user").text == text
    sent = fake.last_request["messages"][-1]["content"]
    assert "tokens cut" in sent and sent.startswith("Here is the log.")
    assert sent.rstrip().endswith("What failed?")
    assert fake.violations == []


def test_a_second_message_during_a_slow_stream_interrupts_within_a_second(fake):
    fake.script(fake_openai.text("word " * 200, delay=0.05), fake_openai.text("Second answer."))
    first = say("tell me a long story")
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.setdefault("turn", run(first)))
    worker.start()
    fake.wait_for_requests(1)
    time.sleep(0.5)  # some deltas have streamed
    second = say("stop, answer this instead")  # interrupt mode: flags the running turn
    stopped_at = time.monotonic()
    worker.join(timeout=5)
    assert time.monotonic() - stopped_at < 1.0
    interrupted = outcome["turn"]
    assert interrupted.status == Turn.Status.INTERRUPTED
    partial = Message.objects.get(pk=interrupted.reply_id)
    assert partial.metadata["interrupted"] and partial.text.startswith("word word")
    assert len(partial.text) < len("word " * 200)
    assert run(second).status == Turn.Status.COMPLETED
    assert Message.objects.filter(role="assistant").last().text == "Second answer."


def test_stop_interrupts_between_tool_calls_keeping_the_step_complete(fake, probe):
    def slow(context, args):
        # Stop is pressed while the first tool runs (an event, not a timer racing the tools).
        request_interrupt(turn.pk, "Stop pressed")
        return "slept"

    probe.tools = lambda: [Tool("slow", "Sleeps.", {"type": "object"}, slow)]
    fake.script(fake_openai.tool_calls([("a", "slow", {}), ("b", "slow", {}), ("c", "slow", {})]))
    turn = say("do slow things")
    finished = run(turn)
    assert (
        finished.status == Turn.Status.INTERRUPTED and finished.interrupt_reason == "Stop pressed"
    )
    tool_rows = Message.objects.filter(role="tool").order_by("id")
    assert [m.metadata["tool_call_id"] for m in tool_rows] == ["a", "b", "c"]
    assert tool_rows.last().text == "Not run: the reply was interrupted."


@pytest.mark.parametrize(
    "script, requests",
    [
        ([fake_openai.error(500)] * 3, 3),
        ([fake_openai.error(429, retry_after=0)] * 3, 3),
        ([fake_openai.hang(5)] * 3, 3),
    ],
)
def test_a_dead_model_fails_the_turn_visibly_and_keeps_the_message(
    fake, settings, script, requests
):
    settings.LLM_TIMEOUT_SECONDS = 0.5
    fake.script(*script)
    seen = []
    turn = run(say("are you there?"), seen.append)
    assert turn.status == Turn.Status.FAILED
    assert "Your message is saved" in turn.error or "model" in turn.error.lower()
    assert len(fake.requests) == requests
    assert Message.objects.get(role="user").text == "are you there?"
    assert seen[-1]["type"] == "turn.failed" and seen[-1]["error"] == turn.error


def test_retries_recover_when_the_model_comes_back(fake):
    fake.script(
        fake_openai.error(503), fake_openai.error(429, retry_after=0), fake_openai.text("back")
    )
    turn = run(say("hello?"))
    assert turn.status == Turn.Status.COMPLETED and len(fake.requests) == 3


def test_no_model_configured_fails_with_instructions(settings):
    settings.LLM_PROVIDER = "none"
    turn = run(say("hi"))
    assert turn.status == Turn.Status.FAILED and "LLM_BASE_URL" in turn.error


def test_shared_chats_prefix_author_names_in_the_prompt_only(fake):
    for user, name, text in [("1", "Ann", "I deploy on Fridays"), ("2", "Bob", "I do not")]:
        message_ingest(
            channel="telegram",
            chat_id=-7,
            chat_kind="group",
            user_id=user,
            user_name=name,
            text=text,
        )
    turn = say("who deploys on Fridays?", chat_id="-7", user="3", name="Cai", channel="telegram")
    run(turn)
    sent = [m["content"] for m in fake.last_request["messages"] if m["role"] == "user"]
    assert sent == ["[Ann] I deploy on Fridays", "[Bob] I do not", "[Cai] who deploys on Fridays?"]
    assert not Message.objects.filter(text__startswith="[").exists()


def test_a_hundred_turns_in_a_4000_token_window_never_overflow(fake, settings):
    settings.LLM_CONTEXT_TOKENS = 4000
    fake.context_window = 4000

    def answer(body):
        last = body["messages"][-1]["content"]
        return fake_openai.text(f"Noted: {last[:40]}. " + "detail " * 60)

    fake.default = answer
    for index in range(100):
        turn = run(say(f"Fact number {index}: the value of item {index} is {index * 7}. " * 3))
        assert turn.status == Turn.Status.COMPLETED, turn.error
    # The fake refuses (and records) any request whose prompt plus max_tokens passes 4,000.
    assert fake.violations == []
    assert len(fake.requests) >= 100
    assert max(fake.prompt_tokens(body) for body in fake.requests) <= 4000
    assert Message.objects.filter(role="summary").exists()
    assert Turn.objects.filter(status="completed").count() == 100
    identity = IDENTITY.format(name=settings.AGENT_NAME)[:60]
    assert identity in fake.requests[-1]["messages"][0]["content"]
    assert not Message.objects.filter(text__contains=identity).exists(), "a prompt was stored"
    assert not Message.objects.filter(text__contains="Today's date is").exists()


def test_the_admin_explains_what_the_model_saw(fake, settings, admin_client):
    settings.LLM_CONTEXT_TOKENS = 2800  # room for every app's tool definitions
    settings.CONTEXT_MIN_HISTORY_MESSAGES = 0
    for index in range(30):
        say(f"old message {index} " + "filler " * 60, user=f"u{index}")
    Turn.objects.all().delete()
    turn = run(say("what did I say first? " + "long " * 400))
    page = admin_client.get(f"/admin/chats/turn/{turn.pk}/change/").content.decode()
    assert "What the model saw" in page
    assert "current message (cut)" in page and f"{turn.trigger_id}" in page
    assert "dropped" in page  # the oldest messages did not fit
    assert "total sent" in page


def test_a_model_server_that_is_down_fails_the_turn_after_retries(settings):
    from hermes_site.embedded_valkey import free_port

    settings.LLM_PROVIDER = "openai"
    settings.LLM_BASE_URL = f"http://127.0.0.1:{free_port()}/v1"  # nobody listens there
    settings.LLM_MODEL = "m"
    settings.LLM_MAX_RETRIES = 2
    settings.LLM_RETRY_BASE_SECONDS = 0.0
    seen = []
    turn = run(say("anyone home?"), seen.append)
    assert turn.status == Turn.Status.FAILED
    assert "Your message is saved" in turn.error
    assert seen[-1]["type"] == "turn.failed"
    assert Message.objects.get(role="user").text == "anyone home?"
