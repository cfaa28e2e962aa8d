"""History as the builder reads it: the scan and the bounds are plain SQL written once, and
must read exactly the rows (and fields) the ORM's rules name: summaries and markers left out,
replies finished after the trigger in, later user messages, the turn's own steps and notices
out, a reset ending the history, a narrowed scope, every batch size."""

import pytest
from django.db.models import Q

from chats.agent.compression import summary_store
from chats.agent.convert import StoredMessage
from chats.agent.history import _HistoryScan, history_bounds
from chats.models import Message, Turn
from chats.services import chat_reset
from tests.agent.test_context import say, store, tool_group

pytestmark = [pytest.mark.django_db]


def expected_rows(chat, *, start_id, trigger_id, end_id=None, only_ids=None, turn=None):
    """The rows by the ORM, newest first, as the scan must yield them."""
    rows = Message.objects.filter(chat=chat, id__gt=start_id).exclude(
        role__in=(Message.Role.SUMMARY, Message.Role.MARKER)
    )
    rows = rows.filter(
        Q(id__lt=trigger_id)
        | Q(id__gt=trigger_id, role__in=(Message.Role.ASSISTANT, Message.Role.TOOL))
    )
    if end_id is not None:
        rows = rows.filter(id__lt=end_id)
    if only_ids is not None:
        rows = rows.filter(id__in=only_ids)
    result = []
    for message in rows.select_related("actor").order_by("-id"):
        stored = StoredMessage.from_message(message)
        if turn is not None and stored.turn_id == turn.pk:
            continue
        if stored.metadata.get("notice"):
            continue
        result.append(stored)
    return result


def scan(chat, *, wanted=None, **bounds):
    history = _HistoryScan(
        chat,
        start_id=bounds["start_id"],
        trigger_id=bounds["trigger_id"],
        end_id=bounds.get("end_id"),
        turn=bounds.get("turn"),
        only_ids=bounds.get("only_ids"),
    )
    if wanted is not None:
        history.wanted = wanted
    return list(history)


def busy_chat():
    """A shared chat with every kind of row the scan must sort out."""
    first = say("busy", "first words", kind="group")
    chat = first.chat
    say("busy", "[Bob] is not a name", user="bob", name="Bo[b]", kind="group")
    store(chat, "assistant", "an answer", metadata={"turn": 1, "interrupted": True})
    tool_group(chat, [("c1", "memory", {"q": "x"}, "found"), ("c2", "web", {}, "page")], turn=2)
    store(chat, "system", "a photo arrived")
    store(chat, "system", "Saved for review", metadata={"notice": "review"})
    for index in range(70):  # more than one batch
        say("busy", f"message {index} 部署", kind="group")
    trigger = say("busy", "what now?", kind="group")
    turn = Turn.objects.create(chat=chat, trigger=trigger)
    store(chat, "assistant", "late reply to an earlier trigger", metadata={"turn": 1})
    store(chat, "assistant", "this turn's own step", metadata={"turn": turn.pk})
    say("busy", "a later question", kind="group")
    return chat, first, trigger, turn


def test_the_scan_reads_what_the_rules_name_at_every_batch_size():
    chat, first, trigger, turn = busy_chat()
    for start_id in (0, first.pk):
        expected = expected_rows(chat, start_id=start_id, trigger_id=trigger.pk, turn=turn)
        assert len(expected) > 70
        for wanted in (None, 1, 33, 5000):
            got = scan(chat, wanted=wanted, start_id=start_id, trigger_id=trigger.pk, turn=turn)
            assert got == expected


def test_a_reset_ends_the_history_and_a_scope_narrows_it():
    chat, first, trigger, _ = busy_chat()
    marker = chat_reset(chat=chat)
    store(chat, "assistant", "after the reset", metadata={"turn": 9})
    bounds = {"start_id": 0, "trigger_id": trigger.pk, "end_id": marker.pk}
    assert scan(chat, **bounds) == expected_rows(chat, **bounds)
    chosen = frozenset(Message.objects.filter(chat=chat).values_list("id", flat=True)[3:9])
    scoped = {"start_id": 0, "trigger_id": trigger.pk, "only_ids": chosen}
    assert scan(chat, **scoped) == expected_rows(chat, **scoped)
    assert scan(chat, start_id=0, trigger_id=trigger.pk, only_ids=frozenset()) == []


def test_bounds_take_the_newest_summary_before_the_trigger_and_the_reset_after_it():
    chat, first, trigger, _ = busy_chat()
    ids = list(Message.objects.filter(chat=chat).order_by("id").values_list("id", flat=True))
    older = summary_store(
        chat=chat,
        text="older",
        covers_from_id=ids[0],
        covers_to_id=ids[5],
        previous_summary_id=None,
    )
    newer = summary_store(
        chat=chat,
        text="newer",
        covers_from_id=ids[0],
        covers_to_id=ids[-1],
        previous_summary_id=None,
    )
    bounds = history_bounds(chat, before_id=trigger.pk)  # the newest ends after the trigger
    assert bounds.summary.id == older.pk and bounds.summary.text == "older"
    assert bounds.summary.metadata["covers_to_id"] == ids[5] == bounds.start_id
    assert history_bounds(chat).summary.id == newer.pk
    marker = chat_reset(chat=chat)
    assert history_bounds(chat, before_id=trigger.pk).end_id == marker.pk
    after = say("busy", "after the reset", kind="group")
    reset = history_bounds(chat, before_id=after.pk)
    assert (reset.marker_id, reset.summary, reset.start_id) == (marker.pk, None, marker.pk)
