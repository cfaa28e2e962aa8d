"""The terminal's y/N prompt for a tool call that waits for a decision, in a real process
and in-process; who may answer it; and `/tools on` in a brand-new terminal chat."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from chats.models import Chat, ChatMember, Turn
from chats.services import chat_get_or_create, chat_member_ensure
from tests.fakes import openai_server as fake_openai
from tests.live import database_url_for_subprocesses
from tests.toolservers.conftest import PROBE, PYTHON, add_server, enable
from toolservers.models import ChatToolset, ToolApproval, ToolCall

pytestmark = pytest.mark.django_db(transaction=True)
BASE_DIR = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def terminal(make_person, tmp_path):
    """cli:ops with the probe on; dana is alone in it (its decider)."""
    dana = make_person("dana")
    chat, _ = chat_get_or_create(channel="cli", chat_id="ops")
    chat_member_ensure(chat=chat, person=dana)
    # The folder append_line writes in is named, so the sandbox shows it.
    enable(chat, add_server("probe", stdio=[PYTHON, PROBE, str(tmp_path)]))
    return chat, dana


def append(log, line="deployed"):
    return fake_openai.tool_calls([("c1", "probe__append_line", {"path": str(log), "line": line})])


def chat_in_process(monkeypatch, answers, *args):
    typed = iter(answers)

    def fake_input(prompt=""):
        try:
            return next(typed)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)
    out = io.StringIO()
    call_command("chat", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_a_decider_answers_y_in_a_real_terminal_and_the_call_runs_once(
    fake_llm, terminal, tmp_path
):
    chat, dana = terminal
    log = tmp_path / "deploy.log"
    fake_llm.script(append(log), fake_openai.text("Deployed."))
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_subprocesses(),
        "LLM_PROVIDER": "openai",
        "LLM_BASE_URL": fake_llm.base_url,
        "LLM_MODEL": "fake-model",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "chat", "--profile", "ops", "--user", "dana"],
        input="deploy it\ny\n/quit\n",
        capture_output=True,
        text=True,
        cwd=BASE_DIR,
        env=env,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "[waiting: approval of probe__append_line]" in out
    assert "Approval needed: probe__append_line" in out and str(log) in out
    assert "Run it? [y]es / [N]o / [a]lways allow here:" in out
    assert "Call approved: probe__append_line." in out
    assert "Deployed." in out
    assert log.read_text() == "deployed\n"
    turn = Turn.objects.get(chat=chat)
    assert turn.status == Turn.Status.COMPLETED
    audit = ToolCall.objects.get(chat=chat, tool="append_line")
    assert (audit.decision, audit.decided_by) == ("approved", dana)
    assert ToolApproval.objects.get(turn=turn).decided_via == "terminal"


def test_no_declines_and_always_allows(fake_llm, terminal, tmp_path, monkeypatch):
    chat, _ = terminal
    log = tmp_path / "deploy.log"
    fake_llm.script(append(log, "one"), fake_openai.text("Not done."))
    out = chat_in_process(monkeypatch, ["n"], "-m", "deploy", "--profile", "ops", "--user", "dana")
    assert "Call declined" in out and "Not done." in out and not log.exists()

    fake_llm.script(append(log, "two"), fake_openai.text("Done."))
    out = chat_in_process(monkeypatch, ["a"], "-m", "deploy", "--profile", "ops", "--user", "dana")
    assert "Call approved" in out and log.read_text() == "two\n"
    assert ChatToolset.objects.get(chat=chat, tool_name="append_line").policy == "allow"


def test_end_of_input_leaves_the_call_waiting(fake_llm, terminal, tmp_path, monkeypatch):
    log = tmp_path / "deploy.log"
    fake_llm.script(append(log))
    out = chat_in_process(monkeypatch, [], "-m", "deploy", "--profile", "ops", "--user", "dana")
    assert "Left undecided" in out
    assert Turn.objects.get(chat=terminal[0]).status == Turn.Status.WAITING
    assert ToolApproval.objects.get().status == "pending" and not log.exists()


def test_someone_who_may_not_decide_is_told_to_wait(
    fake_llm, terminal, tmp_path, monkeypatch, make_person
):
    chat, dana = terminal
    chat_member_ensure(chat=chat, person=dana, role=ChatMember.Role.OWNER)
    make_person("eve")
    log = tmp_path / "deploy.log"
    fake_llm.script(append(log))
    asked = []
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "y")
    out = io.StringIO()
    call_command("chat", "-m", "deploy", "--profile", "ops", "--user", "eve", stdout=out)
    assert "Waiting for an owner or admin of this chat to decide" in out.getvalue()
    assert asked == [] and not log.exists()
    assert ToolApproval.objects.get().status == "pending"


def test_tools_on_works_in_a_brand_new_terminal_chat(make_person):
    make_person("finn")
    add_server("probe", stdio=[PYTHON, PROBE])
    out = io.StringIO()
    call_command(
        "chat", "-m", "/tools on probe", "--profile", "fresh", "--user", "finn", stdout=out
    )
    assert "probe is on in this chat" in out.getvalue()
    chat = Chat.objects.get(chat_key="cli:fresh")
    assert ChatToolset.objects.filter(chat=chat, enabled=True).exists()


def test_the_prompt_shows_every_key_marks_hidden_characters_and_prints_the_full_view(
    fake_llm, terminal, tmp_path, monkeypatch, settings
):
    settings.DASHBOARD_URL = "https://hub.example.com"
    # "line" sorts before "path": 10,000 harmless characters must not push the path away.
    target = f"{tmp_path}/\u202egol.sh"
    call = {"path": target, "line": "harmless " * 1200}
    fake_llm.script(fake_openai.tool_calls([("c1", "probe__append_line", call)]))
    out = chat_in_process(monkeypatch, [], "-m", "deploy", "--profile", "ops", "--user", "dana")
    card = ToolApproval.objects.get()
    assert f'"path": "{tmp_path}/⟦U+202E⟧gol.sh"' in out and "\u202e" not in out
    assert '"line": "harmless harmless' in out
    assert "of 10," in out and "characters" in out  # the cut, said
    url = f"https://hub.example.com/chats/cli:ops/approvals/{card.pk}/arguments"
    assert f"see all: {url}" in out
