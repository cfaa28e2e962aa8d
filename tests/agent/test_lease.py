"""The lease of a running turn: kept alive while the turn works (slow tools, slow compression,
a slow first token), and once lost (the turn was recovered as stale and another turn took
the chat) the old loop stops and stores nothing more.

Real HTTP/SSE to the fake model server, a real heartbeat thread with its own database
connection (hence transactional tests), short leases so a lost renewal shows at once."""

import threading
import time

import pytest

from chats.agent.interrupts import interrupt_reason
from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.registry import Tool, register_tool_provider, registry
from chats.agent.turns import (
    LEASE_EXPIRED,
    Claim,
    message_received,
    turn_claim,
    turn_finish_stale,
    turns_recover_stale,
)
from chats.models import BusyMode, Chat, Message, Turn
from chats.services import message_ingest
from tests.fakes import openai_server as fake_openai

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.storage]

LEASE = 2  # seconds; the heartbeat renews every LEASE / 3
FINAL = {"turn.finished", "turn.failed", "turn.interrupted"}


@pytest.fixture
def fake(settings):
    settings.TURN_LEASE_SECONDS = LEASE
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0)
        yield server


def say(text, *, chat_id="room"):
    result = message_ingest(
        channel="api", chat_id=chat_id, user_id="u1", user_name="Ada", text=text
    )
    return message_received(result, enqueue=False)


def run(turn, events=None):
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert claim.outcome is Claim.CLAIMED
    return run_claimed_turn(claim.turn, provider=get_provider(), on_event=events)


def queue_mode(turn):
    Chat.objects.filter(pk=turn.chat_id).update(busy_mode=BusyMode.QUEUE)


class _Recoverer(threading.Thread):
    """Another worker's stale sweep: waits until the model got request `n`, lets more than
    one lease go by, then recovers every running turn whose lease ran out."""

    def __init__(self, fake, n: int, wait: float = LEASE * 2):
        super().__init__(daemon=True)
        self.fake, self.n, self.wait, self.recovered = fake, n, wait, None

    def run(self):
        from django.db import connections

        try:
            self.fake.wait_for_requests(self.n, timeout=30)
            time.sleep(self.wait)
            self.recovered = turns_recover_stale()
        finally:
            connections.close_all()


@pytest.fixture
def tools():
    """Tools the test defines, registered for the duration of the test."""

    class Provider:
        def __init__(self):
            self.list = []

        def tools(self):
            return self.list

    provider = Provider()
    register_tool_provider(provider)
    yield provider.list
    registry.tool_providers.remove(provider)


def test_the_lease_is_renewed_during_a_slow_tool(fake, tools):
    tools.append(
        Tool("slow", "Sleeps.", {"type": "object"}, lambda ctx, args: time.sleep(LEASE * 3))
    )
    fake.script(fake_openai.tool_calls([("c1", "slow", {})]), fake_openai.text("Done."))
    turn = say("run the slow tool")
    sweep = _Recoverer(fake, 1, wait=LEASE * 2)
    sweep.start()
    finished = run(turn)
    sweep.join(timeout=30)
    assert sweep.recovered == 0, "the turn was recovered as stale while its tool ran"
    assert finished.status == Turn.Status.COMPLETED, finished.interrupt_reason
    assert Message.objects.get(pk=finished.reply_id).text == "Done."


def test_the_lease_is_renewed_during_a_slow_first_token(fake):
    fake.script(fake_openai.text("Finally.", chunk_size=100, delay=LEASE * 3))
    turn = say("think hard")
    sweep = _Recoverer(fake, 1)
    sweep.start()
    finished = run(turn)
    sweep.join(timeout=30)
    assert sweep.recovered == 0, "the turn was recovered as stale while the model thought"
    assert finished.status == Turn.Status.COMPLETED
    assert Message.objects.get(pk=finished.reply_id).text == "Finally."


def test_the_lease_is_renewed_during_a_slow_compression(fake, settings):
    settings.LLM_CONTEXT_TOKENS = 2800  # room for every app's tool definitions
    settings.CONTEXT_MIN_HISTORY_MESSAGES = 0
    for index in range(30):  # more than the window holds beside the tools: it compresses
        message_ingest(
            channel="api", chat_id="room", user_id="u1", text=f"note {index} " + "filler " * 60
        )
    fake.script(
        fake_openai.text("- the notes were filler", chunk_size=100, delay=LEASE * 3),
        fake_openai.text("Answer."),
    )
    turn = say("what did I note?")
    sweep = _Recoverer(fake, 1)
    sweep.start()
    finished = run(turn)
    sweep.join(timeout=30)
    assert sweep.recovered == 0, "the turn was recovered as stale while it compressed"
    assert Message.objects.filter(role="summary").exists()  # the slow request was the summary
    assert finished.status == Turn.Status.COMPLETED


def _run_in_thread(turn, seen):
    outcome = {}

    def target():
        from django.db import connections

        try:
            outcome["turn"] = run(turn, seen.append)
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, outcome


def _wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_turn_whose_lease_was_taken_over_stops_and_appends_nothing(fake):
    fake.script(
        fake_openai.text("word " * 300, delay=0.03),
        fake_openai.text("The one reply."),
    )
    queue_mode(say("warm up the chat"))  # the chat exists; its turn is dropped below
    Turn.objects.all().delete()  # a newer message does not interrupt: only the lease decides
    first = say("tell me a long story")
    seen: list[dict] = []
    thread, outcome = _run_in_thread(first, seen)
    _wait_for(lambda: any(e["type"] == "turn.delta" for e in seen))
    # Another process found the first turn's lease expired and recovered it; then the next
    # message of the chat is answered by another loop.
    assert turn_finish_stale(turn_id=first.pk, reason=LEASE_EXPIRED)
    second = run(say("are you there?"))
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert second.status == Turn.Status.COMPLETED
    first.refresh_from_db()
    assert first.status == Turn.Status.INTERRUPTED and first.interrupt_reason == LEASE_EXPIRED
    assert first.reply_id is None
    replies = Message.objects.filter(role="assistant").values_list("text", flat=True)
    assert list(replies) == ["The one reply."], "two loops both appended a reply"
    # The old loop published no outcome of its own (the recovery announced it).
    assert not [e for e in seen if e["type"] in FINAL]
    assert interrupt_reason(first.pk) is None  # no flag left behind


def test_a_turn_taken_over_during_a_tool_stores_no_tool_result(fake, tools):
    release = threading.Event()
    tools.append(
        Tool("wait", "Waits.", {"type": "object"}, lambda ctx, args: release.wait(20) and "ok")
    )
    fake.script(fake_openai.tool_calls([("c1", "wait", {})]), fake_openai.text("The one reply."))
    queue_mode(say("warm up the chat"))
    Turn.objects.all().delete()
    first = say("use the tool")
    seen: list[dict] = []
    thread, outcome = _run_in_thread(first, seen)
    _wait_for(lambda: any(e["type"] == "tool.started" for e in seen))
    assert turn_finish_stale(turn_id=first.pk, reason=LEASE_EXPIRED)
    release.set()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert not Message.objects.filter(role="tool").exists(), "a tool result after the takeover"
    assert len(fake.requests) == 1, "the old loop called the model again"
    assert not [e for e in seen if e["type"] in FINAL | {"tool.finished"}]
    # The chat answers the next message normally.
    second = run(say("and now?"))
    assert Message.objects.get(pk=second.reply_id).text == "The one reply."


def test_a_loop_that_finds_its_lease_gone_stops_even_without_the_interrupt_flag(fake):
    fake.script(fake_openai.text("word " * 300, delay=0.03))
    first = say("tell me a long story")
    seen: list[dict] = []
    thread, outcome = _run_in_thread(first, seen)
    _wait_for(lambda: any(e["type"] == "turn.delta" for e in seen))
    # Marked interrupted by a process that could not raise the flag (Redis down).
    Turn.objects.filter(pk=first.pk).update(status=Turn.Status.INTERRUPTED)
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert not Message.objects.filter(role="assistant").exists()
    assert not [e for e in seen if e["type"] in FINAL]
    deltas = "".join(e["text"] for e in seen if e["type"] == "turn.delta")
    assert len(deltas) < len("word " * 300), "the loop streamed to the end"
