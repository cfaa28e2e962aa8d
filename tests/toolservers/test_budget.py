"""The definitions of a chat's tool-server tools stay within TOOLSERVERS_DEFINITIONS_TOKENS:
descriptions shortened first, then the most useful tools kept, the same ones every turn, the
model told how many were left out, and the prompt report showing the cut."""

import json

import pytest

from chats.agent.counting import tools_tokens
from chats.agent.registry import TurnContext, registry
from chats.agent.tokens import count_tokens
from chats.services import message_ingest
from tests.toolservers.conftest import add_server, enable
from toolservers.provider import tool_server_tools, tool_servers_section
from toolservers.services import server_tools_record

pytestmark = [pytest.mark.storage, pytest.mark.django_db]

WORDS = "This tool reads a record from the archive and returns its fields as text. "


def _tools(server: int) -> list[dict]:
    return [
        {
            "name": f"tool_{n:02d}",
            "description": f"Tool {n} of server {server}. " + WORDS * 30,
            "input_schema": {
                "type": "object",
                "properties": {"key": {"type": "string", "description": "The record's key."}},
            },
            "annotations": {"readOnlyHint": n % 2 == 0},
        }
        for n in range(20)
    ]


@pytest.fixture
def crowded(settings, monkeypatch):
    """A chat with 5 servers of 20 tools each, every one with a long description, one
    tool turned on by name."""
    settings.TOOLSERVERS_DEFINITIONS_TOKENS = 3000
    monkeypatch.setattr(tool_server_tools, "_ensure_listed", lambda context: None)  # no network
    result = message_ingest(channel="api", chat_id="crowded", user_id="u1", text="hello")
    chat = result.chat
    for number in range(5):
        server = add_server(f"srv{number}", url=f"http://127.0.0.1:9/mcp{number}")
        server_tools_record(server=server, announced=_tools(number))
        enable(chat, server, policy="allow")
    enable(chat, server, tool="tool_19", policy="allow")  # srv4, not read-only: named wins
    return TurnContext(chat, result.message)


def _server_tools(context) -> list:
    return [tool for tool in registry.tools_for_turn(context) if "__" in tool.name]


def test_five_servers_of_twenty_tools_stay_within_the_budget(crowded):
    tools = _server_tools(crowded)
    spent = sum(count_tokens(json.dumps(tool.spec(), ensure_ascii=False)) for tool in tools)
    assert 0 < len(tools) < 100 and spent <= 3000
    # As the context report counts the tools block (framing and separators included).
    assert tools_tokens([tool.spec() for tool in tools]) <= 3000
    names = [tool.name for tool in tools]
    assert "srv4__tool_19" in names  # named in the chat's toolset: kept first
    others = [name for name in names if name != "srv4__tool_19"]
    assert all(int(name[-2:]) % 2 == 0 for name in others)  # then read-only ones
    assert names == sorted(names)  # offered in server order
    assert all(len(tool.description) <= 200 + len("[tool server srv0] ") for tool in tools)


def test_the_same_chat_gets_the_same_selection_twice(crowded):
    first = [tool.spec() for tool in _server_tools(crowded)]
    second = [tool.spec() for tool in _server_tools(crowded)]
    assert first == second


def test_the_model_is_told_and_the_report_shows_the_cut(crowded):
    kept = len(_server_tools(crowded))
    line = tool_servers_section.render(crowded)
    assert line == (
        f"Tool servers: {100 - kept} of the 100 tools on in this chat are left out to fit the "
        "tool definitions' budget; if the user needs one of them, say so (a decider can turn "
        "that tool on by name, or turn others off)."
    )
    assert line.details["offered"] == 100 and line.details["kept"] == kept
    assert line.details["left_out"] == 100 - kept and line.details["tokens"] <= 3000


def test_within_the_budget_nothing_is_cut_or_said(crowded, settings):
    settings.TOOLSERVERS_DEFINITIONS_TOKENS = 10**6
    assert len(_server_tools(crowded)) == 100
    assert tool_servers_section.render(crowded) == ""


def test_a_turn_reads_the_toolset_in_constant_queries(crowded, django_assert_num_queries):
    tool_server_tools.tools_for_turn(crowded)  # the first turn may warm caches
    # Whether any server can be on here, the chat's rows, then their tools (listing aside).
    with django_assert_num_queries(3):
        assert len(tool_server_tools.tools_for_turn(crowded)) > 0


def test_a_tool_with_an_invalid_schema_is_left_out_on_every_turn(crowded, settings):
    settings.TOOLSERVERS_DEFINITIONS_TOKENS = 10**6
    server = add_server("broken", url="http://127.0.0.1:9/broken")
    bad = {"type": "object", "properties": {"key": {"type": 12}}}  # "type" must be a name
    server_tools_record(
        server=server,
        announced=[
            {"name": "bad", "description": "", "input_schema": bad, "annotations": {}},
            {"name": "good", "description": "", "input_schema": {"type": "object"}},
        ],
    )
    enable(crowded.chat, server, policy="allow")
    for _turn in range(2):  # the check is remembered; its answer must not change
        names = {tool.name for tool in _server_tools(crowded)}
        assert "broken__good" in names and "broken__bad" not in names
        assert len(names) == 101


def test_a_turn_sends_the_kept_tools_and_its_report_shows_the_cut(crowded, settings):
    from chats.agent.llm import get_provider
    from chats.agent.loop import run_claimed_turn
    from chats.agent.turns import Claim, message_received, turn_claim
    from tests.fakes import openai_server as fake_openai

    with fake_openai.FakeOpenAI() as fake:
        fake.configure(settings, LLM_MAX_RETRIES=0)
        fake.script(fake_openai.text("ok"))
        result = message_ingest(channel="api", chat_id="crowded", user_id="u1", text="again")
        turn = message_received(result, enqueue=False)
        claim = turn_claim(turn_id=turn.pk, worker="test")
        assert claim.outcome is Claim.CLAIMED
        turn = run_claimed_turn(claim.turn, provider=get_provider())
    sent = [
        t["function"]["name"] for t in fake.requests[0]["tools"] if "__" in t["function"]["name"]
    ]
    [section] = [s for s in turn.prompt_report["sections"] if s["name"] == "tool_servers"]
    assert section["status"] == "included"
    assert section["details"]["kept"] == len(sent) and section["details"]["left_out"] == 100 - len(
        sent
    )
    assert turn.prompt_report["tokens"]["tools"] >= section["details"]["tokens"]
    system = fake.requests[0]["messages"][0]["content"]
    assert f"Tool servers: {100 - len(sent)} of the 100 tools" in system
