"""`manage.py chat`, the terminal channel."""

import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.core.management import call_command

from chats.agent.interrupts import request_interrupt
from chats.models import Chat, Message, Turn
from chats.selectors import chat_history
from tests.fakes import openai_server as fake_openai
from tests.live import database_url_for_subprocesses

pytestmark = pytest.mark.django_db(transaction=True)
BASE_DIR = Path(__file__).resolve().parent.parent.parent


def run_interactive(fake_llm, profile: str, typed: str) -> subprocess.CompletedProcess:
    """`manage.py chat --profile <profile>` in a real process, `typed` on its stdin, against
    the fake model (which echoes "you said: ..."); the session must end cleanly."""
    fake_llm.default = fake_openai.echo("you said: ")
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_subprocesses(),
        "LLM_PROVIDER": "openai",
        "LLM_BASE_URL": fake_llm.base_url,
        "LLM_MODEL": "fake-model",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "chat", "--profile", profile],
        input=typed,
        capture_output=True,
        text=True,
        cwd=BASE_DIR,
        env=env,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    return result


def test_one_shot_message_prints_the_streamed_reply(fake_llm):
    fake_llm.script(fake_openai.text("Hello from the agent."))
    out = io.StringIO()
    call_command("chat", "-m", "hello there", "--profile", "ops", stdout=out)
    assert "agent> Hello from the agent." in out.getvalue()
    chat = Chat.objects.get(chat_key="cli:ops")
    assert chat.kind == "cli"
    assert [m.role for m in chat_history(chat)] == ["user", "assistant"]


def test_tool_progress_is_shown_inline(fake_llm):
    fake_llm.script(
        fake_openai.tool_calls([("c1", "current_time", {"timezone": "UTC"})]),
        fake_openai.text("It is late."),
    )
    out = io.StringIO()
    call_command("chat", "-m", "what time is it?", stdout=out)
    assert "[tool current_time … done" in out.getvalue()
    assert "It is late." in out.getvalue()


def test_a_deactivated_user_is_not_sent(member, fake_llm):
    # The terminal asks the rule of every door that posts (chats.selectors.chat_may_post).
    member.is_active = False
    member.save()
    err = io.StringIO()
    call_command(
        "chat", "-m", "I resign", "--user", member.username, stdout=io.StringIO(), stderr=err
    )
    assert "Not sent: marco is not an active member of this chat" in err.getvalue()
    assert not Message.objects.exists() and not Turn.objects.exists()


def test_one_shot_exits_with_an_error_when_the_turn_fails(settings):
    settings.LLM_PROVIDER = "none"
    err = io.StringIO()
    with pytest.raises(SystemExit) as exit_info:
        call_command("chat", "-m", "hello", stdout=io.StringIO(), stderr=err)
    assert exit_info.value.code == 1
    assert "LLM_BASE_URL" in err.getvalue()
    assert Message.objects.get(role="user").text == "hello"


def test_an_interrupt_stops_a_slow_reply_and_keeps_the_partial_text(fake_llm):
    fake_llm.script(fake_openai.text("tick " * 200, delay=0.05))

    def interrupt_when_running():
        fake_llm.wait_for_requests(1, timeout=10)
        turn = Turn.objects.get()
        threading.Timer(0.3, request_interrupt, args=(turn.pk, "stopped from the terminal")).start()

    threading.Thread(target=interrupt_when_running).start()
    out = io.StringIO()
    call_command("chat", "-m", "count slowly", stdout=out)
    assert "[interrupted: stopped from the terminal]" in out.getvalue()
    turn = Turn.objects.get()
    assert turn.status == "interrupted"
    assert Message.objects.get(pk=turn.reply_id).metadata["interrupted"] is True


def test_interactive_session_new_keeps_history_but_starts_fresh_context(fake_llm):
    result = run_interactive(
        fake_llm, "repl", "first question\n/new\nsecond question\n/stop\n/quit\n"
    )
    assert "you said: first question" in result.stdout
    assert "Fresh context" in result.stdout and "Nothing is running." in result.stdout
    chat = Chat.objects.get(chat_key="cli:repl")
    assert [m.text for m in chat_history(chat, since_reset=False) if m.role == "user"] == [
        "first question",
        "second question",
    ]
    # After /new the model no longer sees the first exchange.
    sent = fake_llm.requests[-1]["messages"]
    assert not any("first question" in str(m.get("content")) for m in sent)


def _skills():
    """One active skill, one stale, one archived, one new skill waiting for a reviewer."""
    from skills.models import Skill, Via
    from skills.services import Author, skill_create, skill_import
    from tests.skills.helpers import skill_md

    author = Author(via=Via.COMMAND)
    for name, description in (("deploy-staging", "Deploy to staging."), ("old-tool", "Gone.")):
        content = skill_md(name=name, description=description)
        skill_import(name=name, content=content, files={}, category="ops", author=author)
    Skill.objects.filter(slug="old-tool").update(status=Skill.Status.ARCHIVED)
    content = skill_md(name="old-runbook", description="Before the move.")
    skill_import(name="old-runbook", content=content, files={}, category="ops", author=author)
    Skill.objects.filter(slug="old-runbook").update(status=Skill.Status.STALE)
    waiting = skill_md(name="secret-plan", description="Not approved.")
    agent = Author()  # the agent, with no chat of its own: its change waits
    assert skill_create(name="secret-plan", content=waiting, author=agent).code == "proposed"


def test_one_shot_slash_command_prints_the_answer_and_starts_no_turn(fake_llm):
    _skills()
    out = io.StringIO()
    call_command("chat", "-m", "/skills", "--profile", "ops", stdout=out)
    assert "Skills I know (2):\n• deploy-staging [ops]: Deploy to staging." in out.getvalue()
    assert "• old-runbook [ops] (stale): Before the move." in out.getvalue()  # as the dashboard
    assert "old-tool" not in out.getvalue() and "secret-plan" not in out.getvalue()
    out = io.StringIO()
    call_command("chat", "-m", "/skills nothing-like-this", stdout=out)
    assert "No skill matches “nothing-like-this”." in out.getvalue()
    # Like Telegram's commands: not a message, no turn, the model never asked.
    assert not Message.objects.exists() and not Turn.objects.exists()
    assert fake_llm.requests == []


def test_interactive_session_answers_help_and_registered_commands(fake_llm):
    _skills()
    result = run_interactive(
        fake_llm, "cmds", "/help\n/skills deploy\n/unknown-thing please\n/quit\n"
    )
    banner = result.stdout.splitlines()[1]
    assert banner == "Also: /attach /schedules /skills /tools"
    assert "/skills – The skills I know (/skills word to filter)" in result.stdout
    assert "/new – Start a fresh context" in result.stdout
    assert "• deploy-staging [ops]: Deploy to staging." in result.stdout
    assert "old-runbook" not in result.stdout  # filtered out by the word
    # A slash that names no command is a message like any other.
    assert "you said: /unknown-thing please" in result.stdout
    chat = Chat.objects.get(chat_key="cli:cmds")
    assert [m.text for m in chat_history(chat) if m.role == "user"] == ["/unknown-thing please"]
