"""The review's snapshot: authorship in brackets, the newest messages within the budget."""

import pytest

from chats.agent.tokens import count_tokens
from chats.models import Chat, Message
from chats.services import message_append, message_ingest
from learning.snapshot import build_snapshot

pytestmark = pytest.mark.django_db


def _group(count: int) -> Chat:
    for n in range(count):
        user, name = ("10", "Alice") if n % 2 == 0 else ("20", "Bob")
        message_ingest(
            channel="telegram",
            chat_id="-100",
            user_id=user,
            user_name=name,
            chat_kind="group",
            text=f"message number {n}: " + "the deploy needs the staging cluster " * 3,
        )
    return Chat.objects.get()


def test_every_user_message_carries_its_author_in_brackets():
    chat = _group(4)
    message_append(chat=chat, role=Message.Role.ASSISTANT, text="Done, the rollout is green.")
    snapshot = build_snapshot(chat=chat, after_id=None, to_id=None, budget_tokens=6000)
    lines = snapshot.text.splitlines()
    assert lines[0].startswith("[Alice] message number 0")
    assert lines[1].startswith("[Bob] message number 1")
    assert lines[-1] == "Hermes: Done, the rollout is green."
    assert snapshot.authors == ["Alice", "Bob"] and snapshot.omitted == 0
    assert snapshot.shown == 5


def test_the_snapshot_keeps_the_newest_messages_within_the_token_budget():
    chat = _group(60)
    snapshot = build_snapshot(chat=chat, after_id=None, to_id=None, budget_tokens=300)
    assert snapshot.tokens == count_tokens(snapshot.text) <= 300
    assert "message number 59" in snapshot.text  # the newest is kept
    assert "message number 0:" not in snapshot.text
    assert snapshot.omitted > 0 and snapshot.omitted + snapshot.shown == 60


def test_the_snapshot_covers_only_its_range_and_never_the_people_only_notices():
    chat = _group(6)
    ids = list(Message.objects.order_by("id").values_list("id", flat=True))
    message_append(
        chat=chat,
        role=Message.Role.SYSTEM,
        text="Saved for review: 1 memory fact (Bob).",
        metadata={"notice": "learning"},
    )
    snapshot = build_snapshot(chat=chat, after_id=ids[1], to_id=None, budget_tokens=6000)
    assert "message number 1:" not in snapshot.text and "message number 2:" in snapshot.text
    assert "Saved for review" not in snapshot.text
    bounded = build_snapshot(chat=chat, after_id=ids[1], to_id=ids[3], budget_tokens=6000)
    assert bounded.shown == 2 and "message number 4" not in bounded.text


def test_one_huge_newest_message_is_cut_to_fit():
    chat = _group(1)
    message_append(chat=chat, role=Message.Role.ASSISTANT, text="word " * 5000)
    snapshot = build_snapshot(chat=chat, after_id=None, to_id=None, budget_tokens=250)
    assert 0 < snapshot.tokens <= 250 and "tokens cut" in snapshot.text


def test_a_memory_snapshot_keeps_tool_output_to_a_line_so_peoples_words_fit():
    chat = _group(2)
    for n in range(12):
        message_append(
            chat=chat,
            role=Message.Role.TOOL,
            text=f"pod-{n} Running " + "log line with details " * 80,
            metadata={"tool": "kubectl_get_pods"},
        )
    full = build_snapshot(chat=chat, after_id=None, to_id=None, budget_tokens=1500)
    lean = build_snapshot(
        chat=chat, after_id=None, to_id=None, budget_tokens=1500, tool_line_tokens=40
    )
    assert "[Alice] message number 0" not in full.text  # pushed out by tool output
    assert "[Alice] message number 0" in lean.text and lean.omitted == 0
    assert "pod-11 Running" in lean.text and lean.tool_calls == 12
