"""The context builder: budgets, newest-first history, tool groups, cutting, the hard guard
and the prompt report. Data goes in through `message_ingest` (user messages) and direct
Message rows for what the turn loop stores (assistant, tool, summary)."""

import json
import random
import re

import pytest

from chats.agent.context import (
    CUT_FLOOR,
    ContextBudget,
    ContextWindowExceeded,
    build_context,
    enforce_window,
    explain_message,
)
from chats.agent.convert import INTERRUPTED_NOTE, MISSING_TOOL_RESULT, SUMMARY_HEADER
from chats.agent.counting import (
    MESSAGE_OVERHEAD,
    REPLY_PRIMING,
    content_tokens,
    count_messages_tokens,
    message_tokens,
    tools_tokens,
)
from chats.agent.llm.base import ProviderInfo
from chats.agent.registry import Registry, TurnContext
from chats.agent.tokens import count_tokens
from chats.models import Message, Turn
from chats.services import (
    actor_refresh,
    chat_reset,
    message_append,
    message_ingest,
    message_record_edit,
)

pytestmark = [pytest.mark.django_db]

CUT_MARKER = re.compile(r"\[… [\d,]+ tokens cut …\]")
WORDS = [
    "deploy", "server", "database", "release", "pipeline", "cache", "queue", "worker",
    "timeout", "retry", "budget", "prompt", "memory", "skill", "review", "meeting",
    "invoice", "customer", "report", "部署", "服务器", "数据库", "测试",
]  # fmt: skip


def words(count: int, seed: int = 0) -> str:
    rnd = random.Random(seed)
    return " ".join(rnd.choice(WORDS) for _ in range(count))


def say(chat_id="room", text="hello", *, user="alice", name="Alice", channel="web", kind=None):
    return message_ingest(
        channel=channel, chat_id=chat_id, user_id=user, user_name=name, text=text, chat_kind=kind
    ).message


def store(chat, role, text="", **fields):
    """A row the way the turn loop stores it (assistant replies, tool results, notices)."""
    return message_append(chat=chat, role=role, text=text, **fields)


def tool_group(chat, calls, *, text="", turn=1, results=True):
    """An assistant message calling tools, then one result per call (unless results=False)."""
    parts = [
        {"type": "tool_call", "id": call_id, "name": name, "arguments": json.dumps(args)}
        for call_id, name, args, _ in calls
    ]
    call = store(chat, "assistant", text, parts=parts, metadata={"turn": turn})
    stored = []
    if results:
        for call_id, name, _, result in calls:
            stored.append(
                store(
                    chat,
                    "tool",
                    result,
                    metadata={
                        "tool_call_id": call_id,
                        "tool_name": name,
                        "turn": turn,
                        "is_error": False,
                    },
                )
            )
    return call, stored


def info(window=4000, supports_tools=True):
    return ProviderInfo(
        name="fake", model="fake", context_tokens=window, supports_tools=supports_tools
    )


def build(chat, trigger, *, window=4000, tools=None, sections=(), supports_tools=True, turn=None):
    return build_context(
        chat=chat,
        trigger=trigger,
        provider_info=info(window, supports_tools),
        tool_specs=tools or [],
        turn_context=TurnContext(chat=chat, trigger=trigger, turn=turn),
        sections=sections,
    )


def sent_text(built) -> str:
    return "\n".join(str(m.get("content") or "") for m in built.messages)


def assert_tool_groups_intact(messages):
    """Every tool call is followed by exactly its results; every result follows its call."""
    index = 0
    while index < len(messages):
        message = messages[index]
        if message["role"] == "tool":
            raise AssertionError(f"tool result without its call at {index}: {message}")
        calls = message.get("tool_calls") or []
        if message["role"] == "assistant" and calls:
            ids = [call["id"] for call in calls]
            following = messages[index + 1 : index + 1 + len(ids)]
            assert [m["role"] for m in following] == ["tool"] * len(ids), messages
            assert sorted(m["tool_call_id"] for m in following) == sorted(ids)
            index += len(ids)
        index += 1


def assert_fits(built):
    assert built.prompt_tokens <= built.budget.input_limit
    assert built.prompt_tokens == count_messages_tokens(built.messages, built.tool_specs)
    assert built.prompt_tokens + built.max_reply_tokens <= built.budget.window
    json.dumps(built.report)


# --- Budgets and accounting --------------------------------------------------------------


def test_budget_shares_follow_settings(settings):
    budget = ContextBudget.from_settings(10_000)
    assert budget.reply_reserve == 2_000
    assert budget.input_limit == 8_000
    assert (budget.system, budget.history, budget.current) == (1_000, 6_000, 800)

    settings.CONTEXT_SHARE_HISTORY = 0.9  # shares that overflow the input are scaled down
    budget = ContextBudget.from_settings(10_000)
    assert budget.system + budget.history + budget.current <= budget.input_limit
    assert budget.history > budget.system > budget.current


def test_accounting_counts_contents_tool_calls_and_specs():
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "s", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
    ]
    total = count_messages_tokens(messages, tools)
    assert total == REPLY_PRIMING + tools_tokens(tools) + sum(map(message_tokens, messages))
    assert message_tokens(messages[0]) == MESSAGE_OVERHEAD + count_tokens("Be brief.")
    assert message_tokens(messages[1]) > MESSAGE_OVERHEAD  # the call itself costs tokens
    assert content_tokens([{"type": "text", "text": "hi"}]) == count_tokens("hi")


def test_prompt_tokens_is_exactly_the_count_of_what_is_sent():
    """Cached counts plus exact name prefixes and notes: the builder's number is the one
    `count_messages_tokens` gives for the messages it returns, for arbitrary texts."""
    rnd = random.Random(7)
    alphabet = list("abc xyz  \n\t 123 's !?.,;:-()[]\"") + list("中文字符，。😀é") + ["  "]
    people = [("alice", "Alice"), ("bob", "Bob [admin]"), ("li", "李雷")]
    trigger = None
    for number in range(40):
        user, name = rnd.choice(people)
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 400)))
        trigger = say("mix", text or "x", user=user, name=name, kind="group")
        chat = trigger.chat
        if number % 5 == 0:
            store(chat, "assistant", text, metadata={"turn": number, "interrupted": True})
        if number % 7 == 0:
            tool_group(chat, [(f"c{number}", "search", {"q": text[:20]}, text)])
        if number % 11 == 0:
            store(chat, "system", "A photo arrived.")
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    for window in (1_000, 3_000, 8_000, 32_000):
        assert_fits(build(trigger.chat, trigger, window=window, tools=tools))


def test_name_prefixes_and_notes_are_counted_exactly_without_re_encoding():
    """The builder counts "[name] " + text + note from the text's cached count; the result
    must equal encoding the whole string, for any text."""
    from chats.agent.counting import _joined_tokens

    rnd = random.Random(11)
    alphabet = list("ab yz  \n\t 12 345 's 'll !?.,-()[]{}\"") + list("中文，。😀é\u200b") + ["  "]
    for _ in range(3_000):
        body = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 120)))
        prefix = rnd.choice(["", "[Alice] ", "[李雷] ", "[system notice] "])
        suffix = rnd.choice(["", INTERRUPTED_NOTE, " x"])
        expected = count_tokens(prefix + body + suffix)
        assert _joined_tokens(prefix, body, suffix, count_tokens(body)) == expected, (
            prefix,
            body,
            suffix,
        )


# --- History selection -------------------------------------------------------------------


def test_history_is_the_newest_messages_that_fit():
    messages = [say("dm", f"message {n}: {words(60, n)}", channel="api") for n in range(60)]
    trigger = say("dm", "what now?", channel="api")
    built = build(trigger.chat, trigger, window=4_000)
    assert_fits(built)

    included = [row[0] for row in built.report["history"] if row[3] in ("included", "cut")]
    ids = [m.id for m in messages]
    assert included == ids[len(ids) - len(included) :]  # a contiguous newest suffix
    assert 10 < len(included) < 60
    assert built.messages[-1]["content"] == "what now?"
    assert "message 0:" not in sent_text(built)
    assert explain_message(built.report, ids[0])["status"] == "dropped"
    assert explain_message(built.report, ids[-1])["status"] == "included"
    # unused system and current shares flowed to the history
    assert built.report["tokens"]["history"] > built.budget.history


def test_minimum_history_is_kept_cut_rather_than_dropped(settings):
    settings.CONTEXT_MIN_HISTORY_MESSAGES = 4
    old = [say("big", f"OLD{n} " + words(3_000, n), channel="api") for n in range(6)]
    trigger = say("big", "summarise the above", channel="api")
    # large tool specs leave room for fewer than 4 messages at their single-message cap
    tools = [{"type": "function", "function": {"name": "t", "description": words(1_700)}}]
    built = build(trigger.chat, trigger, window=4_000, tools=tools)
    assert_fits(built)
    assert built.report["budget"]["history_available"] < 4 * built.budget.current

    history = built.messages[1:-1]
    assert len(history) == 4
    assert [m["content"].split()[0] for m in history] == ["OLD2", "OLD3", "OLD4", "OLD5"]
    assert all(CUT_MARKER.search(m["content"]) for m in history)
    statuses = {row[0]: row[3] for row in built.report["history"]}
    assert [statuses[m.id] for m in old[2:]] == ["cut"] * 4
    assert [explain_message(built.report, m.id)["status"] for m in old[:2]] == ["dropped"] * 2


def test_a_tool_call_never_travels_without_its_results_at_any_budget(settings):
    chat_trigger = say("tools", "start", channel="api")
    chat = chat_trigger.chat
    for n in range(6):
        say("tools", f"question {n} " + words(40, n), channel="api")
        tool_group(
            chat,
            [
                (f"a{n}", "search", {"q": n}, "result " + words(60 + 20 * n, n)),
                (f"b{n}", "fetch", {"url": n}, "page " + words(30, n + 1)),
            ],
            turn=n,
        )
        store(chat, "assistant", "answer " + words(50, n), metadata={"turn": n})
    # a user message that arrived while tools ran sits between a call and its result
    call, _ = tool_group(chat, [("x1", "slow", {}, "")], turn=99, results=False)
    say("tools", "meanwhile, bob here", channel="api", user="bob", name="Bob")
    store(
        chat,
        "tool",
        "slow result " + words(80),
        metadata={"tool_call_id": "x1", "tool_name": "slow", "turn": 99, "is_error": False},
    )
    trigger = say("tools", "and now?", channel="api")

    results = Message.objects.filter(chat=chat, role="tool")
    groups = [
        [call.id]
        + [r.id for r in results if r.metadata["tool_call_id"] in {p["id"] for p in call.parts}]
        for call in Message.objects.filter(chat=chat, role="assistant").exclude(parts=[])
    ]
    for min_history in (0, 1, 4):
        settings.CONTEXT_MIN_HISTORY_MESSAGES = min_history
        for window in range(700, 7_000, 71):
            built = build(chat, trigger, window=window)
            assert_fits(built)
            assert_tool_groups_intact(built.messages)
            statuses = {row[0]: row[3] for row in built.report["history"]}
            for members in groups:  # all of a group is sent, or none of it
                seen = {statuses.get(i, "dropped") == "dropped" for i in members}
                assert len(seen) == 1, (window, members, statuses)
    assert call.id  # the interleaved group was part of the scenario


def test_missing_results_are_filled_and_orphan_results_never_sent():
    first = say("gaps", "hi", channel="api")
    chat = first.chat
    store(
        chat,
        "tool",
        "orphan result",
        metadata={"tool_call_id": "gone", "tool_name": "x", "turn": 1, "is_error": False},
    )
    tool_group(chat, [("c1", "search", {}, "")], results=False)  # the turn was interrupted
    trigger = say("gaps", "again", channel="api")
    built = build(chat, trigger)
    assert_tool_groups_intact(built.messages)
    assert "orphan result" not in sent_text(built)
    assert MISSING_TOOL_RESULT in sent_text(built)


def test_replies_finished_after_the_trigger_arrived_are_history():
    """Queue mode: B arrived while A was answered; B's turn sees A's reply before B."""
    a = say("queue", "question A", channel="api")
    b = say("queue", "question B", channel="api")
    later_user = say("queue", "question C", channel="api")
    turn_a = Turn.objects.create(chat=a.chat, trigger=a, status="completed")
    turn = Turn.objects.create(chat=a.chat, trigger=b)
    store(a.chat, "assistant", "answer A", metadata={"turn": turn_a.pk})
    store(a.chat, "assistant", "own step", metadata={"turn": turn.pk})
    built = build(a.chat, b, turn=turn)
    contents = [m["content"] for m in built.messages[1:]]
    assert contents == ["question A", "answer A", "question B"]
    assert later_user.id not in {row[0] for row in built.report["history"]}


def test_interrupted_replies_and_notices_reach_the_model_marked():
    first = say("notes", "tell me a story", channel="api")
    chat = first.chat
    store(chat, "assistant", "Once upon a", metadata={"turn": 1, "interrupted": True})
    store(chat, "system", "A photo arrived.")
    trigger = say("notes", "go on", channel="api")
    built = build(chat, trigger)
    assert {"role": "assistant", "content": "Once upon a" + INTERRUPTED_NOTE} in built.messages
    assert {"role": "user", "content": "[system notice] A photo arrived."} in built.messages
    assert Message.objects.get(chat=chat, role="assistant").text == "Once upon a"
    assert_fits(built)


def test_providers_without_tools_get_tool_groups_as_text():
    first = say("notools", "weather?", channel="api")
    tool_group(first.chat, [("c1", "weather", {"city": "Oslo"}, "rain, 8°C")])
    trigger = say("notools", "thanks", channel="api")
    built = build(first.chat, trigger, supports_tools=False)
    assert all(m["role"] != "tool" and "tool_calls" not in m for m in built.messages)
    assert "rain, 8°C" in sent_text(built)
    assert "weather" in sent_text(built)
    assert_fits(built)


# --- Shared chats, the trigger, reset and summaries ---------------------------------------


def test_shared_chats_prefix_author_names_at_build_time_only():
    say("grp", "the deploy failed", user="alice", name="Alice", channel="telegram", kind="group")
    trigger = say("grp", "which server?", user="bob", name="Bob", channel="telegram", kind="group")
    built = build(trigger.chat, trigger)
    assert built.messages[1] == {"role": "user", "content": "[Alice] the deploy failed"}
    assert built.messages[-1] == {"role": "user", "content": "[Bob] which server?"}
    assert "Several people talk in this chat" in built.messages[0]["content"]
    assert "Telegram" in built.messages[0]["content"]
    stored = set(Message.objects.filter(chat=trigger.chat).values_list("text", flat=True))
    assert stored == {"the deploy failed", "which server?"}

    dm = say("dm1", "hello", channel="telegram")
    built = build(dm.chat, dm)
    assert built.messages[-1]["content"] == "hello"
    assert "Several people" not in built.messages[0]["content"]


def test_a_20kb_trigger_reaches_the_model_cut_and_is_stored_whole():
    body = "START-OF-MESSAGE " + words(6_000) + " END-OF-MESSAGE"
    body = body[:10_000] + body[-10_000:]
    assert len(body.encode()) >= 20_000
    trigger = say("paste", body, channel="web", kind="dm")
    built = build(trigger.chat, trigger, window=8_192)
    assert_fits(built)

    sent = built.messages[-1]["content"]
    assert CUT_MARKER.search(sent)
    assert sent.startswith("START-OF-MESSAGE") and sent.endswith("END-OF-MESSAGE")
    assert "\ufffd" not in sent  # cut at token boundaries without splitting characters
    assert message_tokens(built.messages[-1]) <= built.budget.current
    assert built.report["trigger"]["status"] == "cut"
    trigger.refresh_from_db()
    assert trigger.text == body


def test_history_starts_after_the_last_reset_marker():
    before = say("reset", "forget this secret", channel="api")
    marker = chat_reset(chat=before.chat)
    after = say("reset", "fresh start", channel="api")
    trigger = say("reset", "what do you know?", channel="api")
    built = build(trigger.chat, trigger)
    assert "secret" not in sent_text(built)
    assert "fresh start" in sent_text(built)
    assert built.report["reset_marker_id"] == marker.id
    assert explain_message(built.report, before.id)["status"] == "before_reset"
    assert explain_message(built.report, after.id)["status"] == "included"


def test_a_summary_replaces_the_messages_it_covers():
    messages = [say("sum", f"fact number {n}", channel="api") for n in range(20)]
    chat = messages[0].chat
    trigger = say("sum", "recap please", channel="api")
    summary = store(  # written by a compression pass after the trigger arrived
        chat,
        "summary",
        "- Alice listed facts 0 to 9.",
        metadata={
            "covers_from_id": messages[0].id,
            "covers_to_id": messages[9].id,
            "previous_summary_id": None,
        },
    )
    built = build(chat, trigger)
    assert_fits(built)
    text = sent_text(built)
    assert "fact number 3\n" not in text + "\n" and "fact number 9" not in text
    assert "fact number 10" in text and "fact number 19" in text
    assert SUMMARY_HEADER + "- Alice listed facts 0 to 9." in built.messages[0]["content"]
    assert built.report["summary"]["id"] == summary.id
    assert explain_message(built.report, messages[4].id) == {
        "id": messages[4].id,
        "status": "summarised",
        "summary_id": summary.id,
    }
    assert built.report["tokens"]["summary"] > 0


def test_the_report_explains_every_message(settings):
    settings.CONTEXT_MIN_HISTORY_MESSAGES = 1
    old = [say("rep", f"old {n} " + words(200, n), channel="api") for n in range(30)]
    chat = old[0].chat
    summary = store(
        chat,
        "summary",
        "earlier: nothing important",
        metadata={"covers_from_id": old[0].id, "covers_to_id": old[4].id},
    )
    huge = say("rep", "HUGE " + words(2_000), channel="api")
    trigger = say("rep", "ok?", channel="api")
    built = build(chat, trigger, window=4_000)
    assert_fits(built)
    report = built.report
    assert report["history_columns"] == ["id", "role", "tokens", "status"]
    assert explain_message(report, huge.id)["status"] == "cut"
    assert explain_message(report, old[-1].id)["status"] in ("included", "dropped")
    assert explain_message(report, old[6].id)["status"] == "dropped"
    assert explain_message(report, old[1].id)["summary_id"] == summary.id
    assert explain_message(report, trigger.id)["status"] == "included"
    assert report["older_dropped"]["before_id"] > old[6].id
    tokens = report["tokens"]
    assert tokens["total"] == built.prompt_tokens
    assert set(tokens) >= {"system", "sections", "summary", "history", "current", "tools"}
    assert all(isinstance(value, int) for row in report["history"] for value in row[::2])
    assert "old 7" not in json.dumps(report)  # ids and numbers, no texts


# --- System prompt sections ----------------------------------------------------------------


class Section:
    def __init__(self, name, text="", order=0, error=None):
        self.name, self.text, self.order, self.error = name, text, order, error

    def render(self, context):
        if self.error:
            raise self.error
        return self.text


def test_a_failing_section_is_reported_and_a_huge_one_is_cut():
    trigger = say("sections", "hi", channel="web", kind="dm")
    sections = [
        Section("memory", "MEMORY: Alice prefers tea."),
        Section("broken", error=RuntimeError("database down")),
        Section("skills", "SKILLS: " + words(3_000)),
    ]
    built = build(trigger.chat, trigger, window=4_000, sections=sections)
    assert_fits(built)
    system = built.messages[0]["content"]
    assert "MEMORY: Alice prefers tea." in system
    assert CUT_MARKER.search(system)
    statuses = {s["name"]: s["status"] for s in built.report["sections"]}
    assert statuses == {"memory": "included", "broken": "failed", "skills": "cut"}
    assert "database down" in built.report["sections"][1]["error"]
    assert message_tokens(built.messages[0]) <= built.budget.system + MESSAGE_OVERHEAD
    assert "Hermes" in system or "You are" in system
    assert "Today's date is" in system


def test_a_section_can_tell_the_report_about_itself():
    from chats.agent.registry import SectionText

    trigger = say("details", "hi", channel="web", kind="dm")
    listing = SectionText("LISTING: a, b", details={"listed": 2, "left_out": 7})
    sections = [Section("listing", listing), Section("plain", "PLAIN")]
    built = build(trigger.chat, trigger, window=4_000, sections=sections)
    reports = {s["name"]: s for s in built.report["sections"]}
    assert reports["listing"]["details"] == {"listed": 2, "left_out": 7}
    assert reports["listing"]["tokens"] == count_tokens("LISTING: a, b")
    assert "details" not in reports["plain"]
    assert "LISTING: a, b" in built.messages[0]["content"]
    json.dumps(built.report)  # stored as the turn's prompt report


def test_sections_learn_where_the_history_starts():
    seen = []

    class Spy:
        name, order = "spy", 1

        def render(self, context):
            seen.append(context.history_start_id)
            return ""

    first = say("starts", "hi", channel="web", kind="dm")
    build(first.chat, first, sections=[Spy()])
    marker = chat_reset(chat=first.chat)
    later = say("starts", "again", channel="web", kind="dm")
    build(later.chat, later, sections=[Spy()])
    assert seen == [0, marker.pk]


def test_registered_sections_are_used_by_default(monkeypatch):
    from chats.agent import context

    fake = Registry(prompt_sections=[Section("team", "TEAM FACT", order=1)])
    monkeypatch.setattr(context, "registry", fake)
    trigger = say("defaults", "hi", channel="cli")
    built = build_context(
        chat=trigger.chat,
        trigger=trigger,
        provider_info=info(),
        tool_specs=None,
        turn_context=TurnContext(chat=trigger.chat, trigger=trigger),
    )
    assert "TEAM FACT" in built.messages[0]["content"]
    assert "terminal" in built.messages[0]["content"]


# --- The hard guard ------------------------------------------------------------------------


def test_tool_specs_that_cannot_fit_raise_a_clear_error():
    trigger = say("toolspam", "hi", channel="api")
    tools = [
        {"type": "function", "function": {"name": f"t{n}", "description": words(200, n)}}
        for n in range(20)
    ]
    with pytest.raises(ContextWindowExceeded, match="larger context window or fewer tools"):
        build(trigger.chat, trigger, window=1_000, tools=tools)


CORPUS = words(6_000, seed=99).split(" ")


def random_request(rnd: random.Random) -> list[dict]:
    def text(size):
        start = rnd.randint(0, len(CORPUS) - size)
        return " ".join(CORPUS[start : start + size])

    messages = [{"role": "system", "content": text(rnd.randint(5, 800))}]
    for n in range(rnd.randint(0, 25)):
        kind = rnd.random()
        if kind < 0.25:
            calls = [
                {
                    "id": f"c{n}-{k}",
                    "type": "function",
                    "function": {"name": "f", "arguments": "{}"},
                }
                for k in range(rnd.randint(1, 3))
            ]
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            for call in calls:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "content": text(rnd.randint(0, 900)),
                    }
                )
        else:
            role = "user" if kind < 0.6 else "assistant"
            messages.append({"role": role, "content": text(rnd.randint(0, 1_500))})
    messages.append({"role": "user", "content": text(rnd.randint(1, 2_000))})
    if rnd.random() < 0.3:  # a follow-up request inside a turn: its tool steps come last
        call = {"id": "now", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": "now", "content": text(rnd.randint(0, 3_000))}
        )
    return messages


def test_enforce_window_never_exceeds_the_limit():
    rnd = random.Random(2024)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    raised = fitted = 0
    for _ in range(150):
        messages = random_request(rnd)
        snapshot = json.dumps(messages)
        limit = rnd.choice([rnd.randint(20, 400), rnd.randint(150, 12_000)])
        specs = tools if rnd.random() < 0.5 else None
        try:
            result = enforce_window(messages, specs, limit, min_history=rnd.randint(0, 5))
        except ContextWindowExceeded:
            raised += 1
            last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
            protected = [messages[0], *messages[last_user:]]
            floor = REPLY_PRIMING + tools_tokens(specs)
            floor += sum(
                message_tokens(m) - content_tokens(m["content"]) + CUT_FLOOR + 1 for m in protected
            )
            assert limit < floor
            continue
        fitted += 1
        assert count_messages_tokens(result, specs) <= limit
        assert result[0]["role"] == "system"
        assert result[-1]["role"] == messages[-1]["role"]  # the current step is never dropped
        assert_tool_groups_intact(result)
        assert json.dumps(messages) == snapshot  # the input is not modified
        if count_messages_tokens(messages, specs) <= limit:
            assert result == messages
    assert raised and fitted > 100


def test_enforce_window_drops_oldest_history_before_cutting():
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "OLDEST " + words(500)},
        {"role": "assistant", "content": "reply " + words(500)},
        {"role": "user", "content": "newer " + words(100)},
        {"role": "assistant", "content": "newest reply"},
        {"role": "user", "content": "the question"},
    ]
    # dropping the oldest message alone is not enough; its reply goes too, nothing is cut
    limit = count_messages_tokens(messages) - message_tokens(messages[1]) - 10
    result = enforce_window(messages, None, limit, min_history=2)
    assert result == [messages[0], *messages[3:]]  # two dropped, nothing cut


@pytest.mark.parametrize("channel", ["web", "telegram", "api", "cli"])
def test_every_registered_tool_block_is_counted_no_lower_than_its_spaced_json(channel):
    """Providers (and the fake model server) count the `tools` block as the JSON clients
    send, spaces included: the engine's estimate must never be lower, or a full window
    overflows by the difference."""
    from chats.agent.registry import registry

    specs = [tool.spec() for tool in registry.tools_for(channel)]
    assert specs, "the apps register tools"
    assert tools_tokens(specs) >= count_tokens(json.dumps(specs, ensure_ascii=False))


def test_an_edit_a_rename_and_changed_metadata_reach_the_next_context():
    """The builder remembers parsed JSON and name-prefix counts by their texts across
    requests: any change to a row or a name is read anew by the next build, exactly counted."""
    first = say("-100", words(40, seed=3), user="alice", name="Alice", channel="telegram")
    chat = first.chat
    chat.kind = "group"
    chat.save()
    reply = store(chat, "assistant", words(30, seed=4), metadata={"turn": 1})
    trigger = say("-100", "so?", user="bob", name="Bob", channel="telegram")
    before = build(chat, trigger, window=8000)
    assert f"[Alice] {first.text}" in sent_text(before)
    assert INTERRUPTED_NOTE not in sent_text(before)

    original, edited = first.text, words(41, seed=5)
    message_record_edit(message=first, text=edited)
    actor_refresh(actor=first.actor, display_name="Alicia")
    Message.objects.filter(pk=reply.pk).update(metadata={"turn": 1, "interrupted": True})
    after = build(chat, trigger, window=8000)
    text = sent_text(after)
    assert f"[Alicia] {edited}" in text and original not in text
    assert INTERRUPTED_NOTE in text
    assert_fits(after)
