"""Tool servers through the engine with the fake model: real PyPI servers over stdio, the
probe over streamable HTTP, faults that leave the turn completed, and the audit rows."""

import subprocess

import pytest

from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.registry import ORIGIN_REVIEW, TurnContext, registry
from chats.agent.turns import Claim, message_received, turn_claim
from chats.models import Message, Turn
from chats.services import message_ingest
from tests.fakes import openai_server as fake_openai
from tests.toolservers.conftest import PROBE, PYTHON, add_server, enable
from toolservers.models import ToolCall, ToolServer
from toolservers.services import VIA_COMMAND, server_set_default, server_tools_record

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0)
        yield server


def say(text, *, chat_id="tools-room"):
    result = message_ingest(
        channel="api", chat_id=chat_id, user_id="u1", user_name="Ada", text=text
    )
    return message_received(result, enqueue=False)


def run(turn) -> Turn:
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert claim.outcome is Claim.CLAIMED
    return run_claimed_turn(claim.turn, provider=get_provider())


def tool_messages(turn) -> dict[str, Message]:
    rows = Message.objects.filter(chat=turn.chat, role=Message.Role.TOOL)
    return {m.metadata["tool_call_id"]: m for m in rows}


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=Tess", "-c", "user.email=t@example.org"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    (path / "README").write_text("hello\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "Add the deploy checklist"], check=True)
    return path


def test_real_servers_list_run_and_are_audited(fake, repo, http_probe):
    turn = say("what changed, and what time is it in Tokyo?")
    chat = turn.chat
    # The repository is named in the server's arguments: the sandbox shows it nothing else.
    git = [PYTHON, "-m", "mcp_server_git", "--repository", str(repo)]
    enable(chat, add_server("git", stdio=git))
    enable(chat, add_server("time", stdio=[PYTHON, "-m", "mcp_server_time"]))
    enable(chat, add_server("web", url=http_probe), tool="echo")
    fake.script(
        fake_openai.tool_calls(
            [
                ("c1", "git__git_log", {"repo_path": str(repo), "max_count": 5}),
                (
                    "c2",
                    "time__convert_time",
                    {
                        "source_timezone": "UTC",
                        "time": "12:00",
                        "target_timezone": "Asia/Tokyo",
                    },
                ),
                ("c3", "web__echo", {"text": "over http"}),
            ]
        ),
        fake_openai.text("One commit; it is 21:00 in Tokyo."),
    )
    turn = run(turn)
    assert turn.status == Turn.Status.COMPLETED
    offered = {t["function"]["name"] for t in fake.requests[0]["tools"]}
    assert {"git__git_log", "git__git_status", "time__convert_time", "web__echo"} <= offered
    assert "web__hang" not in offered  # only `echo` was turned on for that server
    assert turn.prompt_report["tokens"]["tools"] > 0  # their cost is in the context report
    results = tool_messages(turn)
    assert "Add the deploy checklist" in results["c1"].text
    assert "21:00" in results["c2"].text
    assert results["c3"].text == "echo: over http"
    assert not any(m.metadata["is_error"] for m in results.values())
    calls = {c.tool: c for c in ToolCall.objects.filter(chat=chat)}
    assert set(calls) == {"git_log", "convert_time", "echo"}
    log = calls["git_log"]
    assert log.turn_id == turn.pk and log.person is None and log.actor_id == turn.trigger.actor_id
    assert log.decision == "allowed" and log.arguments["max_count"] == 5 and not log.error
    assert "Add the deploy checklist" in log.result_excerpt and log.result_chars > 0


def test_faults_leave_the_turn_completed_with_clear_errors_and_the_next_call_working(
    fake, settings
):
    settings.TOOLSERVERS_RESULT_TOKENS = 300
    turn = say("try everything")
    chat = turn.chat
    enable(chat, add_server("probe", stdio=[PYTHON, PROBE], call_timeout_seconds=90))
    enable(chat, add_server("slow", stdio=[PYTHON, PROBE], call_timeout_seconds=0.5))
    # Servers listed once that then broke: the executable is gone, the HTTP server is down.
    ghost = add_server("ghost", stdio=["/nonexistent/mcp-server"])
    down = add_server("down", url="http://127.0.0.1:9/mcp")
    for server in (ghost, down):
        server_tools_record(
            server=server,
            announced=[
                {"name": "ping", "input_schema": {"type": "object"}, "annotations": {}},
            ],
        )
        enable(chat, server, policy="allow")
    fake.script(
        fake_openai.tool_calls(
            [
                ("f1", "ghost__ping", {}),
                ("f2", "down__ping", {}),
                ("f3", "slow__hang", {"seconds": 30}),
                ("f4", "probe__echo", {"text": 42}),
                ("f5", "probe__flood", {"megabytes": 10}),
                ("f6", "probe__fetch_note", {}),
            ]
        ),
        fake_openai.tool_calls(
            [
                ("ok", "probe__echo", {"text": "still here"}),
                ("ok2", "slow__echo", {"text": "restarted"}),
            ]
        ),
        fake_openai.text("Done."),
    )
    turn = run(turn)
    assert turn.status == Turn.Status.COMPLETED
    results = tool_messages(turn)
    assert "could not be started or reached" in results["f1"].text
    assert "No such file" in results["f1"].text
    assert "could not be started or reached" in results["f2"].text
    assert "did not answer within 0.5 s" in results["f3"].text
    assert "invalid arguments (text: 42 is not of type 'string')" in results["f4"].text
    flood = results["f5"].text
    assert "tool result cut to 300 tokens" in flood and len(flood) < 5000
    flood_row = ToolCall.objects.get(chat=chat, tool="flood")
    assert flood_row.result_chars > 10_000_000 and len(flood_row.result_excerpt) <= 2000
    assert "Hub note" in results["f6"].text and "do not follow" in results["f6"].text
    assert all(results[k].metadata["is_error"] for k in ("f1", "f2", "f3", "f4"))
    assert results["ok"].text == "echo: still here" and not results["ok"].metadata["is_error"]
    decisions = {c.tool + ":" + c.server_slug: c for c in ToolCall.objects.filter(chat=chat)}
    assert decisions["echo:probe"].decision in ("invalid", "allowed")
    invalid = ToolCall.objects.get(chat=chat, decision="invalid")
    assert invalid.arguments == {"text": 42} and "not of type" in invalid.error
    assert results["ok2"].text == "echo: restarted"
    assert ToolCall.objects.filter(chat=chat).count() == 8  # every call has its row


def test_deny_is_refused_and_ask_makes_the_turn_wait(fake):
    turn = say("clean up")
    chat = turn.chat
    probe = add_server("probe", stdio=[PYTHON, PROBE], call_timeout_seconds=0.5)
    enable(chat, probe)  # policies from annotations: delete_everything has none, so "ask"
    enable(chat, probe, tool="echo", policy="deny")
    fake.script(
        fake_openai.tool_calls(
            [("a2", "probe__echo", {"text": "x"}), ("a1", "probe__delete_everything", {})]
        ),
    )
    turn = run(turn)
    assert turn.status == Turn.Status.WAITING  # see test_approvals for what follows
    results = tool_messages(turn)
    assert "denied in this chat" in results["a2"].text
    assert "a1" not in results  # no result until a decider decides
    rows = {c.tool: c.decision for c in ToolCall.objects.filter(chat=chat)}
    assert rows == {"echo": "denied"}


def test_a_poisoned_description_is_flagged_and_never_offered(fake):
    turn = say("echo something")
    probe = add_server("poisoned", stdio=[PYTHON, PROBE, "--poisoned"])
    enable(turn.chat, probe, policy="allow")
    fake.script(fake_openai.text("ok"))
    run(turn)
    offered = {t["function"]["name"] for t in fake.requests[0]["tools"]}
    assert "poisoned__echo" in offered and "poisoned__poisoned_echo" not in offered
    assert probe.tools.get(name="poisoned_echo").flagged


def test_a_tool_that_runs_only_as_a_task_is_never_offered(fake):
    turn = say("run the job")
    probe = add_server("tasks", stdio=[PYTHON, PROBE, "--task-required"])
    enable(turn.chat, probe, policy="allow")
    fake.script(fake_openai.text("ok"))
    run(turn)
    offered = {t["function"]["name"] for t in fake.requests[0]["tools"]}
    assert "tasks__echo" in offered and "tasks__long_job" not in offered
    assert probe.tools.get(name="long_job").task_support == "required"


def test_a_changed_tool_list_is_listed_again_at_the_next_turn(fake):
    turn = say("grow")
    enable(turn.chat, add_server("growing", stdio=[PYTHON, PROBE]), policy="allow")
    fake.script(
        fake_openai.tool_calls([("g", "growing__grow", {})]),
        fake_openai.text("grown"),
        fake_openai.tool_calls([("e", "growing__extra", {})]),
        fake_openai.text("used it"),
    )
    run(turn)
    assert "growing__extra" not in {t["function"]["name"] for t in fake.requests[0]["tools"]}
    second = run(say("use the new tool"))
    assert "growing__extra" in {t["function"]["name"] for t in fake.requests[2]["tools"]}
    assert tool_messages(second)["e"].text == "extra here"


def test_background_reviews_never_get_tool_server_tools():
    turn = say("hello")
    enable(turn.chat, add_server("time", stdio=[PYTHON, "-m", "mcp_server_time"]))
    chat_names = {t.name for t in registry.tools_for_turn(TurnContext(turn.chat, turn.trigger))}
    assert "time__convert_time" in chat_names
    review = TurnContext(turn.chat, turn.trigger, origin=ORIGIN_REVIEW)
    assert not any("__" in t.name for t in registry.tools_for_turn(review))


# A server that never answers the handshake: it marks that it started, and marks again once
# every one of the hanging servers is running at the same time as itself.
HANGING = """
touch "$1/started-$3"
while [ "$(ls "$1" | grep -c '^started-')" -lt "$2" ]; do sleep 0.05; done
touch "$1/together-$3"
exec sleep 600
"""


def test_hanging_team_default_servers_are_listed_at_once_not_one_after_another(settings, tmp_path):
    settings.TOOLSERVERS_CONNECT_TIMEOUT_SECONDS = 5
    count = 4
    marks = tmp_path / "marks"
    marks.mkdir()
    for n in range(count):
        server = add_server(
            f"hang{n}", stdio=["sh", "-c", HANGING, "sh", str(marks), str(count), str(n)]
        )
        server_set_default(by=None, server=server, on=True, via=VIA_COMMAND)
    turn = say("hello")
    context = TurnContext(turn.chat, turn.trigger)
    assert not any("hang" in t.name for t in registry.tools_for_turn(context))
    # One after another, each would be stopped at the connect timeout before the next one
    # starts; listed at once, all of them run together (and the turn waits for one bound).
    assert len(list(marks.glob("started-*"))) == count
    assert len(list(marks.glob("together-*"))) == count
    assert all("did not start within" in s.last_error for s in ToolServer.objects.all())
