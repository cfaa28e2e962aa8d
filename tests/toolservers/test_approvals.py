"""Approval of `ask` calls through the engine: the turn waits holding nothing, a decider's
press continues it from the stored steps, the call runs exactly once; members, outsiders,
forged and stale presses decide nothing; decline, timeout, "always allow", and what a new
message or a Stop does to a waiting turn."""

from datetime import timedelta

import pytest
from django.utils import timezone

from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import (
    SUPERSEDED_WHILE_WAITING,
    Claim,
    message_received,
    turn_claim,
    turn_stop,
)
from chats.models import BusyMode, ChatMember, Message, Turn
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from tests.fakes import openai_server as fake_openai
from tests.toolservers.conftest import PROBE, PYTHON, add_server, enable
from toolservers.approvals import (
    Decision,
    approval_decide,
    approvals_expire,
    pending_approvals,
)
from toolservers.models import ChatToolset, ToolApproval, ToolCall

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0)
        yield server


@pytest.fixture
def room(owner, member, tmp_path):
    chat, _ = chat_get_or_create(channel="web", chat_id="ops-room", title="Ops")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=member)
    # The folder append_line writes in is named, so the sandbox shows it.
    probe = add_server("probe", stdio=[PYTHON, PROBE, str(tmp_path)])
    enable(chat, probe)  # append_line is destructive: "ask"; echo is read-only: "allow"
    return chat


@pytest.fixture
def log(tmp_path):
    return tmp_path / "deploy.log"


def say(chat, person, text):
    result = message_ingest(
        channel="web",
        chat_id=chat.external_id,
        user_id=person.pk,
        user_name=person.username,
        text=text,
        person=person,
        member=person,
    )
    return message_received(result, enqueue=False)


def run(turn) -> Turn:
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert claim.outcome is Claim.CLAIMED, claim.outcome
    return run_claimed_turn(claim.turn, provider=get_provider())


def append(call_id, log, line="deployed"):
    return (call_id, "probe__append_line", {"path": str(log), "line": line})


def lines(log) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def card_of(turn) -> ToolApproval:
    return ToolApproval.objects.get(turn=turn)


def test_an_ask_call_waits_holding_nothing_and_runs_once_after_the_owner_approves(
    fake, room, owner, member, outsider, log
):
    fake.script(
        fake_openai.tool_calls([append("c1", log)]),
        fake_openai.text("Deployed and logged."),
    )
    turn = run(say(room, member, "deploy and log it"))
    assert turn.status == Turn.Status.WAITING
    turn.refresh_from_db()
    assert (turn.status, turn.worker, turn.lease_expires_at) == ("waiting", "", None)
    assert turn.wait_reason == "approval of probe__append_line"
    assert lines(log) == []  # not run
    card = card_of(turn)
    assert card.arguments == {"path": str(log), "line": "deployed"}
    assert card.requested_by == member and card.status == "pending"
    shown = pending_approvals(chat=room, person=member)
    assert [(c["function"], c["can_decide"]) for c in shown] == [("probe__append_line", False)]
    assert pending_approvals(chat=room, person=outsider) == []

    # A member, an outsider and a forged press decide nothing.
    for person in (member, outsider):
        result = approval_decide(approval_id=card.pk, nonce=card.nonce, person=person, approve=True)
        assert result.outcome is Decision.FORBIDDEN
    forged = approval_decide(approval_id=card.pk, nonce="guess", person=owner, approve=True)
    assert forged.outcome is Decision.FORGED
    assert card_of(turn).status == "pending" and Turn.objects.get(pk=turn.pk).status == "waiting"

    decided = approval_decide(
        approval_id=card.pk, nonce=card.nonce, person=owner, approve=True, enqueue=False
    )
    assert decided.outcome is Decision.DECIDED
    assert Turn.objects.get(pk=turn.pk).status == Turn.Status.QUEUED
    again = approval_decide(approval_id=card.pk, nonce=card.nonce, person=owner, approve=False)
    assert again.outcome is Decision.STALE  # a second press on a decided card

    turn = run(turn)  # a fresh runner: it continues from what the database holds
    assert turn.status == Turn.Status.COMPLETED
    assert turn.reply.text == "Deployed and logged."
    assert lines(log) == ["deployed"]  # exactly once
    assert turn_claim(turn_id=turn.pk, worker="again").outcome is Claim.GONE
    audit = ToolCall.objects.get(chat=room, tool="append_line")
    assert (audit.decision, audit.decided_by, audit.person) == ("approved", owner, member)
    # The model saw the stored step and its result when it went on.
    resumed = fake.requests[-1]["messages"]
    assert resumed[-2]["tool_calls"][0]["id"] == "c1"
    assert resumed[-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": f"appended to {log}",
    }
    results = Message.objects.filter(chat=room, role=Message.Role.TOOL)
    assert [m.metadata["tool_call_id"] for m in results] == ["c1"]


def test_a_declined_call_is_not_run_and_the_model_is_told(fake, room, owner, member, log):
    fake.script(fake_openai.tool_calls([append("c1", log)]), fake_openai.text("Understood."))
    turn = run(say(room, member, "deploy"))
    card = card_of(turn)
    result = approval_decide(
        approval_id=card.pk, nonce=card.nonce, person=owner, approve=False, enqueue=False
    )
    assert result.outcome is Decision.DECIDED
    turn = run(turn)
    assert turn.status == Turn.Status.COMPLETED and lines(log) == []
    told = Message.objects.get(chat=room, role=Message.Role.TOOL)
    assert "olivia declined this call" in told.text and told.metadata["is_error"]
    audit = ToolCall.objects.get(chat=room, tool="append_line")
    assert (audit.decision, audit.decided_by) == ("rejected", owner)


def test_no_decision_in_time_denies_the_call(fake, room, owner, member, log, settings):
    settings.TOOLSERVERS_APPROVAL_TIMEOUT_SECONDS = 60
    fake.script(fake_openai.tool_calls([append("c1", log)]), fake_openai.text("It timed out."))
    turn = run(say(room, member, "deploy"))
    card = card_of(turn)
    assert approvals_expire(enqueue=False) == 0  # not yet due
    assert approvals_expire(now=timezone.now() + timedelta(seconds=61), enqueue=False) == 1
    assert card_of(turn).status == ToolApproval.Status.EXPIRED
    late = approval_decide(approval_id=card.pk, nonce=card.nonce, person=owner, approve=True)
    assert late.outcome is Decision.STALE
    turn = run(turn)
    assert turn.status == Turn.Status.COMPLETED and lines(log) == []
    told = Message.objects.get(chat=room, role=Message.Role.TOOL)
    assert "nobody decided within 1 minutes" in told.text
    assert ToolCall.objects.get(chat=room, tool="append_line").decision == "expired"


def test_always_allow_sets_the_policy_and_the_next_call_runs_without_asking(
    fake, room, owner, member, log
):
    fake.script(
        fake_openai.tool_calls([append("c1", log, "one")]),
        fake_openai.text("Done once."),
        fake_openai.tool_calls([append("c2", log, "two")]),
        fake_openai.text("Done twice."),
    )
    turn = run(say(room, member, "deploy"))
    card = card_of(turn)
    approval_decide(
        approval_id=card.pk,
        nonce=card.nonce,
        person=owner,
        approve=True,
        always=True,
        enqueue=False,
    )
    run(turn)
    row = ChatToolset.objects.get(chat=room, tool_name="append_line")
    assert (row.policy, row.set_by) == ("allow", owner)
    second = run(say(room, member, "again"))
    assert second.status == Turn.Status.COMPLETED
    assert lines(log) == ["one", "two"]
    assert ToolApproval.objects.count() == 1


def test_calls_before_and_after_the_waiting_one_run_once_in_order(fake, room, owner, member, log):
    fake.script(
        fake_openai.tool_calls(
            [
                ("a", "probe__echo", {"text": "before"}),
                append("b", log, "middle"),
                ("c", "probe__echo", {"text": "after"}),
            ]
        ),
        fake_openai.text("All three."),
    )
    turn = run(say(room, member, "three things"))
    stored = Message.objects.filter(chat=room, role=Message.Role.TOOL)
    assert [m.metadata["tool_call_id"] for m in stored] == ["a"]  # before the wait
    card = card_of(turn)
    approval_decide(
        approval_id=card.pk, nonce=card.nonce, person=owner, approve=True, enqueue=False
    )
    turn = run(turn)
    assert turn.status == Turn.Status.COMPLETED
    stored = Message.objects.filter(chat=room, role=Message.Role.TOOL)
    assert [m.metadata["tool_call_id"] for m in stored] == ["a", "b", "c"]
    assert [m.text for m in stored][0::2] == ["echo: before", "echo: after"]
    assert lines(log) == ["middle"]


def test_a_call_id_reused_in_a_later_step_asks_again(fake, room, owner, member, log):
    """A decision binds to one call (its step and id), not to an id the model repeats."""
    fake.script(
        fake_openai.tool_calls([append("same", log, "first")]),
        fake_openai.tool_calls([append("same", log, "second")]),
        fake_openai.text("Both."),
    )
    turn = run(say(room, member, "twice"))
    first = card_of(turn)
    approval_decide(
        approval_id=first.pk, nonce=first.nonce, person=owner, approve=True, enqueue=False
    )
    turn = run(turn)
    assert turn.status == Turn.Status.WAITING  # the second step asks anew
    second = ToolApproval.objects.get(turn=turn, status="pending")
    assert second.pk != first.pk and second.arguments["line"] == "second"
    assert lines(log) == ["first"]


def test_interrupt_mode_a_new_message_supersedes_a_waiting_turn(fake, room, owner, member, log):
    fake.script(fake_openai.tool_calls([append("c1", log)]), fake_openai.text("Hi."))
    waiting = run(say(room, member, "deploy"))
    card = card_of(waiting)
    newer = say(room, owner, "actually, don't")
    waiting.refresh_from_db()
    assert waiting.status == Turn.Status.INTERRUPTED
    assert waiting.interrupt_reason == SUPERSEDED_WHILE_WAITING
    assert card_of(waiting).status == ToolApproval.Status.CANCELLED
    press = approval_decide(approval_id=card.pk, nonce=card.nonce, person=owner, approve=True)
    assert press.outcome is Decision.STALE
    assert run(newer).status == Turn.Status.COMPLETED
    assert lines(log) == []


def test_queue_mode_a_new_message_waits_behind_the_waiting_turn(
    fake, room, owner, member, log, monkeypatch, settings
):
    woken = []
    monkeypatch.setattr("chats.agent.turns._enqueue", woken.append)
    room.busy_mode = BusyMode.QUEUE
    room.save(update_fields=["busy_mode"])
    fake.script(
        fake_openai.tool_calls([append("c1", log)]),
        fake_openai.text("Deployed."),
        fake_openai.text("And the second answer."),
    )
    waiting = run(say(room, member, "deploy"))
    newer = say(room, owner, "then tell me the status")
    # Parked, not polling: it is woken when the waiting turn goes on.
    assert turn_claim(turn_id=newer.pk, worker="w").outcome is Claim.PARKED
    card = card_of(waiting)
    approval_decide(
        approval_id=card.pk, nonce=card.nonce, person=owner, approve=True, enqueue=False
    )
    assert turn_claim(turn_id=newer.pk, worker="w").outcome is Claim.BUSY  # the older first
    assert woken == []
    assert run(waiting).status == Turn.Status.COMPLETED
    assert woken == [newer.pk]  # the parked turn goes on at once, not at the sweep
    assert run(newer).status == Turn.Status.COMPLETED
    assert lines(log) == ["deployed"]


def test_stop_ends_a_waiting_turn_and_voids_its_card(fake, room, owner, member, log):
    fake.script(fake_openai.tool_calls([append("c1", log)]))
    waiting = run(say(room, member, "deploy"))
    assert turn_stop(turn_id=waiting.pk, chat=room, reason="stopped by olivia")
    waiting.refresh_from_db()
    assert waiting.status == Turn.Status.INTERRUPTED
    assert card_of(waiting).status == ToolApproval.Status.CANCELLED
    assert lines(log) == []


def test_alone_in_their_own_chat_a_person_decides_their_own_calls(fake, member, log):
    chat, _ = chat_get_or_create(channel="web", chat_id="dm-marco", kind="dm")
    chat_member_ensure(chat=chat, person=member, role=ChatMember.Role.OWNER)
    enable(chat, add_server("probe", stdio=[PYTHON, PROBE, str(log.parent)]))
    fake.script(fake_openai.tool_calls([append("c1", log)]), fake_openai.text("Done."))
    turn = run(say(chat, member, "deploy"))
    card = card_of(turn)
    result = approval_decide(
        approval_id=card.pk, nonce=card.nonce, person=member, approve=True, enqueue=False
    )
    assert result.outcome is Decision.DECIDED
    assert run(turn).status == Turn.Status.COMPLETED and lines(log) == ["deployed"]


def test_the_sweep_leaves_turns_parked_behind_a_waiting_turn_alone(
    fake, room, owner, member, log, settings
):
    from chats.agent.turns import turns_requeue_lost

    settings.TURN_REQUEUE_AFTER_SECONDS = 0
    room.busy_mode = BusyMode.QUEUE
    room.save(update_fields=["busy_mode"])
    fake.script(fake_openai.tool_calls([append("c1", log)]))
    run(say(room, member, "deploy"))
    say(room, owner, "and then?")
    requeued = []
    assert turns_requeue_lost(enqueue=requeued.append) == 0 and requeued == []
