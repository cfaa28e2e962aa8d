"""Every model call's usage reaches the ledger and the daily sums, exactly: turns (also
across a wait for a decision), compression summaries, tool calls (counted and timed, never
priced); figures equal the sums of the recorded turns at known prices."""

from datetime import UTC, datetime

import pytest
from django.utils import timezone

from chats.agent.compression import compress_history
from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.registry import Tool, register_tool_provider, registry
from chats.agent.turns import Claim, turn_claim, turn_finish, turn_resume, turn_wait
from chats.models import Message, Turn
from tests.agent.test_compression import FakeProvider, conversation
from tests.fakes import openai_server as fake_openai
from tests.usage.helpers import day_sums, nanos, price, record_sums, say
from usage.models import Kind, UsageDay, UsageRecord
from usage.selectors import spend

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=2)
        yield server


def run(turn):
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert claim.outcome is Claim.CLAIMED
    return run_claimed_turn(claim.turn, provider=get_provider())


class _Adder:
    def tools(self):
        schema = {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        }
        return [Tool("add", "Add two integers.", schema, lambda ctx, a: {"sum": a["a"] + a["b"]})]


@pytest.fixture
def adder():
    provider = _Adder()
    register_tool_provider(provider)
    yield provider
    registry.tool_providers.remove(provider)


def test_figures_equal_the_sums_of_the_recorded_turns_at_known_prices(fake, make_person):
    price(fake.model, "2.50", "10")
    ada = make_person("ada")
    turns = [
        run(say(text, chat_id=room, user=str(ada.pk), person=ada))
        for text, room in [("hi", "r1"), ("how are you?", "r1"), ("and here?", "r2")]
    ]
    assert all(turn.status == Turn.Status.COMPLETED for turn in turns)
    prompt = sum(turn.prompt_tokens for turn in turns)
    completion = sum(turn.completion_tokens for turn in turns)
    expected_cost = sum(
        nanos(turn.prompt_tokens, turn.completion_tokens, "2.50", "10") for turn in turns
    )
    assert prompt > 0 and completion > 0
    sums = day_sums(person=ada, kind=Kind.TURN)
    assert sums == {
        "calls": 3,
        "prompt": prompt,
        "completion": completion,
        "cost_nanos": expected_cost,
        "unpriced_tokens": 0,
    }
    assert record_sums(person=ada) == sums
    today = timezone.now().date()
    mine = spend(start=today, end=today.replace(year=today.year + 1), person_id=ada.pk)
    assert mine.tokens == prompt + completion and mine.cost is not None
    assert mine.cost_nanos == expected_cost
    room = turns[2].chat_id
    in_r2 = spend(start=today, end=today.replace(year=today.year + 1), chat_id=room)
    assert in_r2.prompt_tokens == turns[2].prompt_tokens
    # Each turn's record points at it (the drill-down).
    assert set(UsageRecord.objects.values_list("turn_id", flat=True)) == {t.pk for t in turns}


def test_an_unpriced_model_has_an_unknown_cost_never_zero(fake, make_person):
    ada = make_person("ada")
    turn = run(say("hi", user=str(ada.pk), person=ada))
    record = UsageRecord.objects.get(turn=turn)
    assert record.cost_nanos is None and record.cost is None
    today = timezone.now().date()
    mine = spend(start=today, end=today.replace(year=today.year + 1), person_id=ada.pk)
    assert mine.cost is None and mine.unpriced_tokens == turn.prompt_tokens + turn.completion_tokens


def test_tool_calls_are_counted_and_timed_not_priced(fake, adder, make_person):
    price(fake.model, 1, 1)
    ada = make_person("ada")
    fake.script(
        fake_openai.tool_calls([("c1", "add", {"a": 1, "b": 2}), ("c2", "add", {"a": 3, "b": 4})]),
        fake_openai.text("3 and 7."),
    )
    turn = run(say("add", user=str(ada.pk), person=ada))
    assert turn.status == Turn.Status.COMPLETED and turn.iterations == 2
    tools = UsageRecord.objects.filter(kind=Kind.TOOL, turn=turn)
    assert [t.detail for t in tools.order_by("id")] == ["add", "add"]
    assert all(t.cost_nanos is None and t.duration_ms is not None for t in tools)
    assert all(t.prompt_tokens == t.completion_tokens == 0 for t in tools)
    day = UsageDay.objects.get(kind=Kind.TOOL)
    assert day.calls == 2 and day.unpriced_calls == 0 and day.unpriced_tokens == 0
    assert day.person == ada and day.model == ""
    model_work = UsageRecord.objects.get(kind=Kind.TURN, turn=turn)
    assert model_work.calls == 2  # two model calls in the turn
    assert model_work.prompt_tokens == turn.prompt_tokens


def test_a_turn_that_waits_records_each_stretch_once(make_person):
    ada = make_person("ada")
    turn = say("go", user=str(ada.pk), person=ada)
    claimed = turn_claim(turn_id=turn.pk, worker="w").turn
    claimed.model, claimed.prompt_tokens, claimed.completion_tokens = "m", 100, 10
    claimed.iterations = 1
    assert turn_wait(turn=claimed, reason="approval of x")
    assert turn_resume(turn_id=turn.pk, enqueue=False)
    again = turn_claim(turn_id=turn.pk, worker="w").turn
    assert again.prompt_tokens == 100  # it continues from its stored counters
    again.prompt_tokens, again.completion_tokens, again.iterations = 250, 30, 3
    assert turn_finish(turn=again, status=Turn.Status.COMPLETED, reply_text="done")
    stretches = list(UsageRecord.objects.filter(turn=turn).order_by("id"))
    assert [(r.prompt_tokens, r.completion_tokens, r.calls) for r in stretches] == [
        (100, 10, 1),
        (150, 20, 2),
    ]
    stored = Turn.objects.get(pk=turn.pk)
    assert day_sums(kind=Kind.TURN)["prompt"] == stored.prompt_tokens == 250
    # A second finish of the same turn (a lost lease) stores and records nothing.
    assert not turn_finish(turn=again, status=Turn.Status.COMPLETED, reply_text="again")
    assert UsageRecord.objects.filter(turn=turn).count() == 2


def test_compression_summaries_record_their_usage_for_the_turn(make_person):
    ada = make_person("ada")
    price("fake-model", 1, 2)
    messages = conversation("squash", 24, size=30)
    turn = say("x", chat_id="squash", channel="telegram", user="ada-tg", person=ada)
    chat = messages[0].chat
    assert chat.pk == turn.chat_id
    summary = compress_history(
        chat=chat, provider=FakeProvider("- a summary"), window_tokens=4_000, turn=turn
    )
    assert summary is not None
    assert summary.metadata["usage"] == {"prompt_tokens": 10, "completion_tokens": 10}
    record = UsageRecord.objects.get(kind=Kind.COMPRESSION)
    assert (record.turn_id, record.chat_id, record.person_id) == (turn.pk, chat.pk, ada.pk)
    assert (record.model, record.prompt_tokens, record.completion_tokens) == ("fake-model", 10, 10)
    assert record.cost_nanos == nanos(10, 10, 1, 2)
    assert day_sums(kind=Kind.COMPRESSION)["prompt"] == 10


def test_a_failed_summary_records_nothing():
    messages = conversation("fail", 24, size=30)
    failing = FakeProvider(RuntimeError("down"))
    assert compress_history(chat=messages[0].chat, provider=failing, window_tokens=4_000) is None
    assert not UsageRecord.objects.exists() and not UsageDay.objects.exists()


def test_the_day_is_the_utc_day_of_the_work():
    from usage.services import usage_record

    late = datetime(2026, 3, 1, 23, 59, 59, tzinfo=UTC)
    record = usage_record(kind=Kind.TURN, chat_id=None, person_id=None, model="m", at=late)
    assert record.day.isoformat() == "2026-03-01"
    assert Message.objects.count() == 0
