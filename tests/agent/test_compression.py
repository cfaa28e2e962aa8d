"""History compression: when it triggers, what the summariser sees, how summaries chain,
what a failure leaves behind, and a long conversation on a small window."""

import copy
import json
import logging
import random
import re

import pytest

from chats.agent.compression import (
    SUMMARISER_PROMPT,
    compress_history,
    history_tokens,
    needs_compression,
    summary_store,
)
from chats.agent.context import build_context
from chats.agent.convert import SUMMARY_HEADER
from chats.agent.counting import count_messages_tokens
from chats.agent.llm.base import Finish, LLMError, ProviderInfo, TextDelta, Usage
from chats.agent.registry import TurnContext
from chats.agent.tokens import count_tokens
from chats.models import Message
from chats.services import chat_reset, message_append, message_ingest

pytestmark = [pytest.mark.django_db]

WORDS = [
    "deploy", "server", "database", "release", "pipeline", "cache", "queue", "worker",
    "timeout", "retry", "budget", "invoice", "customer", "report", "部署", "服务器", "测试",
]  # fmt: skip


def words(count: int, seed: int = 0) -> str:
    rnd = random.Random(seed)
    return " ".join(rnd.choice(WORDS) for _ in range(count))


class FakeProvider:
    """Records every request and streams scripted replies (an Exception is raised)."""

    def __init__(self, *replies, window=4_000):
        self.info = ProviderInfo(
            name="fake", model="fake-model", context_tokens=window, supports_tools=True
        )
        self.replies = list(replies)
        self.calls = []

    def stream(self, messages, *, tools=None, max_tokens=None, should_stop=None):
        self.calls.append(
            {"messages": copy.deepcopy(messages), "tools": tools, "max_tokens": max_tokens}
        )
        reply = self.replies.pop(0) if self.replies else f"- summary #{len(self.calls)}"
        if isinstance(reply, Exception):
            raise reply
        for piece in re.findall(r".{1,7}", reply, re.S):
            yield TextDelta(piece)
        yield Usage(prompt_tokens=10, completion_tokens=10)
        yield Finish("stop")

    def request_tokens(self, call):
        return count_messages_tokens(call["messages"])


def say(chat_id, text, *, user="alice", name="Alice", kind="group"):
    return message_ingest(
        channel="telegram", chat_id=chat_id, user_id=user, user_name=name, text=text, chat_kind=kind
    ).message


def store(chat, role, text="", **fields):
    """A row the way the turn loop stores it (assistant replies, tool results, notices)."""
    return message_append(chat=chat, role=role, text=text, **fields)


def tool_group(chat, call_id, result, *, turn=1):
    parts = [{"type": "tool_call", "id": call_id, "name": "search", "arguments": '{"q": 1}'}]
    call = store(chat, "assistant", "", parts=parts, metadata={"turn": turn})
    meta = {"tool_call_id": call_id, "tool_name": "search", "turn": turn, "is_error": False}
    return call, store(chat, "tool", result, metadata=meta)


def conversation(chat_id, turns, *, size=60, first=0):
    """Alice and Bob ask, the agent answers: `turns` × 2 messages of about `size` words."""
    messages = []
    for n in range(first, first + turns):
        who = ("alice", "Alice") if n % 2 == 0 else ("bob", "Bob")
        question = say(chat_id, f"Q{n} " + words(size, n), user=who[0], name=who[1])
        messages.append(question)
        reply = f"A{n} " + words(size, n + 1000)
        messages.append(store(question.chat, "assistant", reply, metadata={"turn": n}))
    return messages


def summaries(chat):
    return list(Message.objects.filter(chat=chat, role="summary").order_by("id"))


# --- When to compress --------------------------------------------------------------------


def test_needs_compression_once_history_passes_the_threshold(settings):
    settings.COMPRESSION_THRESHOLD = 0.5
    messages = conversation("thr", 3)
    chat = messages[0].chat
    assert not needs_compression(chat, 4_000)
    conversation("thr", 20)
    assert history_tokens(chat) > 2_000
    assert needs_compression(chat, 4_000)
    assert not needs_compression(chat, 128_000)

    chat_reset(chat=chat)  # history starts again after a reset
    assert not needs_compression(chat, 4_000)


def test_a_summary_stands_in_for_what_it_covers(settings):
    settings.COMPRESSION_THRESHOLD = 0.5
    messages = conversation("cover", 20)
    chat = messages[0].chat
    assert needs_compression(chat, 4_000)
    summary_store(
        chat=chat,
        text="- short",
        covers_from_id=messages[0].id,
        covers_to_id=messages[-5].id,
        previous_summary_id=None,
    )
    assert not needs_compression(chat, 4_000)


# --- Summarising -------------------------------------------------------------------------


def test_compression_summarises_the_older_part_into_a_summary_message():
    messages = conversation("sum", 24, size=30)
    chat = messages[0].chat
    provider = FakeProvider("- Alice and Bob discussed the deploy.\n- Open: who rolls back?")
    summary = compress_history(chat=chat, provider=provider, window_tokens=4_000)

    assert summary is not None and summary.role == "summary"
    assert summary.text == "- Alice and Bob discussed the deploy.\n- Open: who rolls back?"
    assert summary.external_id.startswith("hermes-summary-")
    assert summary.token_count == count_tokens(summary.text)
    assert summary.metadata["covers_from_id"] == messages[0].id
    assert summary.metadata["previous_summary_id"] is None
    covered_to = summary.metadata["covers_to_id"]
    kept = [m for m in messages if m.id > covered_to]
    assert 4 <= len(kept) < len(messages)
    assert sum(m.token_count + 4 for m in kept) <= 0.6 * 4_000 / 2  # about half the history

    (call,) = provider.calls
    system, user = call["messages"]
    assert system["role"] == "system" and "running summary" in system["content"]
    assert user["content"].startswith("Conversation:\n")
    assert "Alice: Q0" in user["content"] and "Bob: Q1" in user["content"]
    assert "Hermes: A0" in user["content"]
    assert f"Q{len(messages) // 2 - 1} " not in user["content"]  # the newest stay as they are
    assert call["tools"] is None
    assert provider.request_tokens(call) + call["max_tokens"] <= 4_000

    trigger = say("sum", "where were we?")
    built = build_context(
        chat=chat,
        trigger=trigger,
        provider_info=provider.info,
        tool_specs=[],
        turn_context=TurnContext(chat=chat, trigger=trigger),
        sections=(),
    )
    assert SUMMARY_HEADER + summary.text in built.messages[0]["content"]
    assert "Q0 " not in json.dumps(built.messages, ensure_ascii=False)
    assert built.report["summary"]["id"] == summary.id


def test_a_later_pass_updates_the_previous_summary():
    messages = conversation("upd", 24)
    chat = messages[0].chat
    provider = FakeProvider("- FIRST SUMMARY", "- SECOND SUMMARY")
    first = compress_history(chat=chat, provider=provider, window_tokens=4_000)
    more = conversation("upd", 12, first=100)
    second = compress_history(chat=chat, provider=provider, window_tokens=4_000)

    assert second is not None
    assert second.metadata["covers_from_id"] == first.metadata["covers_from_id"] == messages[0].id
    assert second.metadata["previous_summary_id"] == first.id
    assert second.metadata["covers_to_id"] > first.metadata["covers_to_id"]
    covered = Message.objects.filter(
        chat=chat, id__lte=second.metadata["covers_to_id"], role__in=["user", "assistant"]
    )
    assert second.metadata["messages"] == covered.count()
    user = provider.calls[1]["messages"][1]["content"]
    assert user.startswith("Previous summary:\n- FIRST SUMMARY\n\nNew messages:\n")
    assert "Q0 " not in user  # what the first summary covers is not sent again
    assert more[0].text in user
    assert second.text == "- SECOND SUMMARY"  # only the model's text is stored


def test_tool_groups_are_never_split_by_a_summary_boundary():
    for tail in range(0, 8):
        chat_id = f"grp{tail}"
        messages = conversation(chat_id, 10)
        chat = messages[0].chat
        for n in range(tail):
            tool_group(chat, f"{chat_id}-c{n}", "result " + words(40 + 30 * n, n))
            say(chat_id, f"after tool {n} " + words(20, n))
        provider = FakeProvider()
        summary = compress_history(chat=chat, provider=provider, window_tokens=3_000)
        if summary is None:
            continue
        covered = summary.metadata["covers_to_id"]
        for call in Message.objects.filter(chat=chat, role="assistant").exclude(parts=[]):
            result = Message.objects.get(
                chat=chat, role="tool", metadata__tool_call_id=call.parts[0]["id"]
            )
            assert (call.id <= covered) == (result.id <= covered), (tail, call.id, covered)


def test_a_large_tool_result_at_the_boundary_goes_with_its_call(settings):
    settings.CONTEXT_MIN_HISTORY_MESSAGES = 4
    messages = conversation("edge", 10, size=30)
    chat = messages[0].chat
    call, result = tool_group(chat, "edge-1", "rows " + words(1_200))  # more than is kept
    newest = [say("edge", f"short {n}") for n in range(4)]
    summary = compress_history(chat=chat, provider=FakeProvider(), window_tokens=3_000)
    assert summary is not None
    # the result alone overflows what is kept, so the call goes into the summary with it
    assert summary.metadata["covers_to_id"] == result.id > call.id
    assert all(message.id > summary.metadata["covers_to_id"] for message in newest)


def test_the_trigger_and_what_follows_are_never_summarised():
    messages = conversation("trig", 24)
    chat = messages[0].chat
    trigger = messages[10]
    summary = compress_history(
        chat=chat, provider=FakeProvider(), window_tokens=4_000, before_id=trigger.id
    )
    assert summary is not None
    assert summary.metadata["covers_to_id"] < trigger.id


def test_a_failing_summariser_stores_nothing_and_is_retried(caplog):
    messages = conversation("fail", 24)
    chat = messages[0].chat
    provider = FakeProvider(LLMError("upstream 503"), RuntimeError("bug"), "- recovered")
    with caplog.at_level(logging.WARNING, logger="chats.agent.compression"):
        assert compress_history(chat=chat, provider=provider, window_tokens=4_000) is None
        assert compress_history(chat=chat, provider=provider, window_tokens=4_000) is None
    assert "upstream 503" in caplog.text and "bug" in caplog.text
    assert summaries(chat) == []
    assert needs_compression(chat, 4_000)  # so the next turn tries again

    summary = compress_history(chat=chat, provider=provider, window_tokens=4_000)
    assert summary is not None and summary.text == "- recovered"


def test_an_empty_or_cancelled_summary_counts_as_a_failure():
    messages = conversation("empty", 24)
    chat = messages[0].chat
    assert compress_history(chat=chat, provider=FakeProvider("   "), window_tokens=4_000) is None
    assert summaries(chat) == []


def test_a_range_too_large_for_the_window_is_summarised_in_passes(settings):
    """An imported history far beyond the window: each pass summarises as much as its
    request can hold, and the next pass continues where the last one stopped."""
    settings.CONTEXT_MIN_HISTORY_MESSAGES = 4
    messages = conversation("huge", 60, size=120)
    chat = messages[0].chat
    provider = FakeProvider()
    covered = []
    while needs_compression(chat, 2_000) and len(covered) < 40:
        summary = compress_history(chat=chat, provider=provider, window_tokens=2_000)
        assert summary is not None
        covered.append(summary.metadata["covers_to_id"])
        assert summary.metadata["covers_from_id"] == messages[0].id
    assert len(covered) > 2 and covered == sorted(covered)
    for call in provider.calls:
        assert provider.request_tokens(call) + call["max_tokens"] <= 2_000
        assert SUMMARISER_PROMPT.splitlines()[0].format(agent="Hermes") in str(call["messages"])
    for summary in summaries(chat):
        assert "running summary" not in summary.text  # never a prompt in a stored message


# --- A long conversation on a small window -------------------------------------------------


def test_a_hundred_turns_on_a_4000_token_window_stay_within_the_limit(settings):
    settings.COMPRESSION_THRESHOLD = 0.5
    settings.CONTEXT_MIN_HISTORY_MESSAGES = 4
    rnd = random.Random(3)
    window = 4_000
    provider = FakeProvider(window=window)
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    chat = None
    built_with_summary = 0
    for turn in range(100):
        who = rnd.choice([("alice", "Alice"), ("bob", "Bob"), ("carol", "Carol")])
        size = rnd.choice([10, 30, 80, 200, 900])
        trigger = say("loop", f"T{turn} " + words(size, turn), user=who[0], name=who[1])
        chat = trigger.chat
        if needs_compression(chat, window):
            compress_history(
                chat=chat, provider=provider, window_tokens=window, before_id=trigger.id
            )
        built = build_context(
            chat=chat,
            trigger=trigger,
            provider_info=provider.info,
            tool_specs=tools,
            turn_context=TurnContext(chat=chat, trigger=trigger),
            sections=(),
        )
        assert built.prompt_tokens <= built.budget.input_limit
        assert built.prompt_tokens == count_messages_tokens(built.messages, tools)
        assert built.messages[-1]["content"].startswith(f"[{who[1]}] T{turn}")
        built_with_summary += built.report["summary"] is not None
        if turn % 4 == 1:
            tool_group(chat, f"call-{turn}", "found " + words(rnd.randint(5, 400), turn), turn=turn)
        store(
            chat,
            "assistant",
            f"R{turn} " + words(rnd.randint(5, 250), turn),
            metadata={"turn": turn},
        )

    stored = summaries(chat)
    assert len(stored) >= 3
    first_id = Message.objects.filter(chat=chat).order_by("id").first().id
    assert stored[-1].metadata["covers_from_id"] == first_id  # one summary covers from the start
    assert built_with_summary > 50
