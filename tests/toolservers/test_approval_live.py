"""Approval with real processes: the turn waits on a real worker without holding it (the
solo worker answers another chat meanwhile), the worker dies and restarts while the call
waits, and the decision continues the turn there: nothing lost, the call run once."""

import time

import pytest

from chats.models import ChatMember, Message, Turn
from chats.services import api_token_create, chat_get_or_create, chat_member_ensure
from tests.agent.test_end_to_end import post, wait_for_turn
from tests.fakes import openai_server as fake_openai
from tests.toolservers.conftest import PROBE, PYTHON, add_server, enable
from toolservers.approvals import Decision, approval_decide
from toolservers.models import ToolApproval, ToolCall

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def room(make_person, tmp_path):
    owner = make_person("alice")
    chat, _ = chat_get_or_create(channel="api", chat_id="ops", title="Ops")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    # The folder append_line writes in is named, so the sandbox shows it.
    enable(chat, add_server("probe", stdio=[PYTHON, PROBE, str(tmp_path)]))
    _, token = api_token_create(person=owner)
    return chat, owner, token


def test_a_waiting_call_survives_a_worker_restart_and_runs_once(
    live_stack, fake_llm, room, tmp_path
):
    chat, owner, token = room
    log = tmp_path / "deploy.log"
    fake_llm.script(
        fake_openai.tool_calls([("c1", "probe__append_line", {"path": str(log), "line": "v2"})]),
        fake_openai.text("Meanwhile: hello."),
        fake_openai.text("Deployed v2."),
    )
    _, body = post(
        live_stack,
        token,
        {"chat_id": "ops", "user_id": "u1", "message_id": "m-1", "text": "deploy v2"},
    )
    turn_id = body["turn"]["id"]
    waiting = wait_for_turn(turn_id, {"waiting"}, timeout=60)
    assert (waiting.worker, waiting.lease_expires_at) == ("", None)

    # The solo worker is free: another chat is answered while the call waits.
    _, other = post(
        live_stack, token, {"chat_id": "other", "user_id": "u1", "message_id": "m-2", "text": "hi"}
    )
    answered = wait_for_turn(other["turn"]["id"], {"completed", "failed"})
    assert Message.objects.get(pk=answered.reply_id).text == "Meanwhile: hello."

    live_stack.kill_worker()
    live_stack.start_worker()
    assert Turn.objects.get(pk=turn_id).status == "waiting"  # a restart does not end it

    card = ToolApproval.objects.get(turn_id=turn_id)
    result = approval_decide(approval_id=card.pk, nonce=card.nonce, person=owner, approve=True)
    assert result.outcome is Decision.DECIDED
    turn = wait_for_turn(turn_id, {"completed", "failed", "interrupted"}, timeout=60)
    assert turn.status == "completed", (turn.error, turn.interrupt_reason)
    assert Message.objects.get(pk=turn.reply_id).text == "Deployed v2."
    assert log.read_text() == "v2\n"
    time.sleep(1)
    assert log.read_text() == "v2\n" and len(fake_llm.requests) == 3
    audit = ToolCall.objects.get(chat=chat, tool="append_line")
    assert (audit.decision, audit.decided_by) == ("approved", owner)
