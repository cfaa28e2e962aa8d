import time

import pytest

from chats.agent.builtin_tools import CURRENT_TIME, SESSION_SEARCH
from chats.agent.registry import Registry, Tool, TurnContext
from chats.agent.tools import execute_tool_call
from chats.services import chat_member_ensure, message_ingest


def _tool(handler, **extra):
    return Tool(
        name="probe",
        description="test tool",
        parameters={
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 0}},
            "required": ["n"],
            "additionalProperties": False,
        },
        handler=handler,
        **extra,
    )


CONTEXT = TurnContext(chat=None, trigger=None)


def test_valid_call_returns_the_handler_result_as_text():
    tools = {"probe": _tool(lambda ctx, args: {"double": args["n"] * 2})}
    result = execute_tool_call(tools, "probe", '{"n": 21}', CONTEXT)
    assert not result.is_error
    assert result.content == '{"double": 42}'


@pytest.mark.parametrize(
    "raw, expected",
    [
        ('{"n": ', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"n": "x"}', "invalid arguments (n: 'x' is not of type 'integer')"),
        ('{"n": -1}', "invalid arguments (n:"),
        ("{}", "'n' is a required property"),
        ('{"n": 1, "extra": true}', "Additional properties"),
    ],
)
def test_bad_arguments_become_error_results(raw, expected):
    called = []
    tools = {"probe": _tool(lambda ctx, args: called.append(args))}
    result = execute_tool_call(tools, "probe", raw, CONTEXT)
    assert result.is_error and expected in result.content
    assert called == []


def test_unknown_tool_lists_the_available_ones():
    result = execute_tool_call({"probe": _tool(lambda c, a: 1)}, "nope", "{}", CONTEXT)
    assert (
        result.is_error and "no tool named 'nope'" in result.content and "probe" in result.content
    )


def test_raising_tool_becomes_an_error_result():
    def boom(ctx, args):
        raise RuntimeError("disk on fire")

    result = execute_tool_call({"probe": _tool(boom)}, "probe", '{"n": 1}', CONTEXT)
    assert result.is_error and "RuntimeError: disk on fire" in result.content


def test_slow_tool_times_out():
    tools = {"probe": _tool(lambda c, a: time.sleep(2), timeout_seconds=0.2)}
    started = time.monotonic()
    result = execute_tool_call(tools, "probe", '{"n": 1}', CONTEXT)
    assert result.is_error and "did not finish within 0.2 s" in result.content
    assert time.monotonic() - started < 1.5


def test_huge_results_are_cut_with_a_marker():
    result = execute_tool_call(
        {"probe": _tool(lambda c, a: "x" * 100_000)}, "probe", '{"n": 1}', CONTEXT
    )
    assert len(result.content) < 40_000 and "characters of tool output cut" in result.content


def test_current_time_honours_time_zones():
    tools = {"current_time": CURRENT_TIME}
    ok = execute_tool_call(tools, "current_time", '{"timezone": "Asia/Shanghai"}', CONTEXT)
    assert not ok.is_error and "+08:00" in ok.content
    bad = execute_tool_call(tools, "current_time", '{"timezone": "Mars/Olympus"}', CONTEXT)
    assert bad.is_error and "unknown time zone" in bad.content


def test_registry_filters_by_channel_and_refuses_duplicate_names():
    telegram_only = _tool(lambda c, a: 1, channels=frozenset({"telegram"}))

    class Provider:
        def __init__(self, *tools):
            self._tools = tools

        def tools(self):
            return self._tools

    registry = Registry(tool_providers=[Provider(telegram_only, CURRENT_TIME)])
    assert [t.name for t in registry.tools_for("web")] == ["current_time"]
    assert {t.name for t in registry.tools_for("telegram")} == {"probe", "current_time"}
    registry.tool_providers.append(Provider(CURRENT_TIME))
    with pytest.raises(ValueError, match="two tools"):
        registry.tools_for("web")


def test_per_turn_tools_join_the_fixed_ones_and_a_failing_provider_leaves_them_alone():
    chat = type("Chat", (), {"channel": "web"})()
    context = TurnContext(chat=chat, trigger=None)

    class PerTurn:
        def __init__(self, *tools, fail=False):
            self._tools, self._fail = tools, fail

        def tools(self):
            return []

        def tools_for_turn(self, context):
            if self._fail:
                raise RuntimeError("tool server listing broke")
            return self._tools

    clash = Tool("current_time", "not the clock", {"type": "object"}, lambda c, a: 1)
    extra = Tool("srv__echo", "echo", {"type": "object"}, lambda c, a: 1)
    registry = Registry(tool_providers=[_FixedProvider(CURRENT_TIME), PerTurn(clash, extra)])
    tools = {t.name: t for t in registry.tools_for_turn(context)}
    assert set(tools) == {"current_time", "srv__echo"} and tools["current_time"] is CURRENT_TIME
    registry.tool_providers.append(PerTurn(fail=True))
    assert {t.name for t in registry.tools_for_turn(context)} == {"current_time", "srv__echo"}


def test_on_finished_hears_every_outcome_in_the_callers_thread_and_cannot_break_it():
    import threading

    from chats.agent.registry import ToolError

    heard = []

    def on_finished(context, arguments, outcome):
        heard.append((threading.current_thread() is threading.main_thread(), outcome))

    def refuse(context, arguments):
        raise ToolError("not here")

    tools = {
        "ok": Tool("ok", "", {"type": "object"}, lambda c, a: "fine", on_finished=on_finished),
        "no": Tool("no", "", {"type": "object"}, refuse, on_finished=on_finished),
        "slow": Tool(
            "slow",
            "",
            {"type": "object"},
            lambda c, a: time.sleep(1),
            timeout_seconds=0.1,
            on_finished=on_finished,
        ),
    }
    assert execute_tool_call(tools, "ok", "{}", CONTEXT).content == "fine"
    assert execute_tool_call(tools, "no", "{}", CONTEXT).content == "Error: not here"
    assert execute_tool_call(tools, "slow", "{}", CONTEXT).is_error
    assert [main for main, _ in heard] == [True, True, True]
    assert heard[0][1] == "fine" and isinstance(heard[1][1], ToolError)
    assert isinstance(heard[2][1], TimeoutError)

    def broken(context, arguments, outcome):
        raise RuntimeError("audit down")

    tools["ok"] = Tool("ok", "", {"type": "object"}, lambda c, a: "fine", on_finished=broken)
    assert execute_tool_call(tools, "ok", "{}", CONTEXT).content == "fine"


class _FixedProvider:
    def __init__(self, *tools):
        self._tools = tools

    def tools(self):
        return self._tools


@pytest.mark.django_db(transaction=True)
def test_session_search_in_a_group_stays_in_that_group(owner):
    # The owner's private chat mentions the secret; the group must not reveal it.
    dm = message_ingest(
        channel="web",
        chat_id="olivia-dm",
        chat_kind="dm",
        user_id="olivia",
        text="the vault code is 4711",
        person=owner,
        member=owner,
    )
    group_msg = message_ingest(
        channel="telegram",
        chat_id=-5,
        chat_kind="group",
        user_id="7",
        text="where is the vault?",
        person=owner,
    )
    chat_member_ensure(chat=dm.chat, person=owner)
    tools = {"session_search": SESSION_SEARCH}
    in_group = TurnContext(chat=group_msg.chat, trigger=group_msg.message, person=owner)
    result = execute_tool_call(tools, "session_search", '{"query": "vault"}', in_group)
    assert not result.is_error
    assert "4711" not in result.content and '"count": 0' in result.content

    later_dm = message_ingest(
        channel="web",
        chat_id="olivia-dm",
        user_id="olivia",
        text="what was the vault code?",
        person=owner,
    )
    in_dm = TurnContext(chat=dm.chat, trigger=later_dm.message, person=owner)
    result = execute_tool_call(tools, "session_search", '{"query": "vault"}', in_dm)
    assert "4711" in result.content


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("channel, kind", [("telegram", "dm"), ("openai", "api")])
def test_session_search_with_a_member_added_stays_in_that_chat(owner, member, channel, kind):
    # The owner's other chat mentions the secret; a member added to her DM or `/v1`
    # conversation reads every tool result there, so the search must not reach beyond it.
    message_ingest(
        channel="web",
        chat_id="olivia-room",
        chat_kind="room",
        user_id="olivia",
        text="the vault code is 4711",
        person=owner,
        member=owner,
    )
    asked = message_ingest(
        channel=channel,
        chat_id="olivia-own",
        chat_kind=kind,
        user_id="olivia",
        text="where is the vault?",
        person=owner,
        member=owner,
    )
    tools = {"session_search": SESSION_SEARCH}
    here = TurnContext(chat=asked.chat, trigger=asked.message, person=owner)
    alone = execute_tool_call(tools, "session_search", '{"query": "vault"}', here)
    assert "4711" in alone.content  # her one-reader chat: her other chats are in reach

    chat_member_ensure(chat=asked.chat, person=member)
    shared = execute_tool_call(tools, "session_search", '{"query": "vault"}', here)
    assert not shared.is_error
    assert "4711" not in shared.content and '"scope": "this chat"' in shared.content
