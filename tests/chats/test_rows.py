"""insert_row writes the row save() writes, on both databases."""

import pytest
from django.db import IntegrityError, transaction
from django.forms.models import model_to_dict

from bots.models import OutboundMessage, ProcessedUpdate
from chats.models import Turn
from chats.rows import insert_row
from chats.services import message_ingest

pytestmark = [pytest.mark.storage, pytest.mark.django_db]


def test_insert_row_writes_what_save_writes():
    result = message_ingest(channel="web", chat_id="rows", user_id="u1", text="hi", message_id=1)
    chat, message = result.chat, result.message
    by_save = Turn.objects.create(chat=chat, trigger=message)
    by_insert = insert_row(Turn(chat=chat, trigger=message))
    assert by_insert.pk and by_insert.pk != by_save.pk and not by_insert._state.adding
    stored = {turn.pk: turn for turn in Turn.objects.filter(pk__in=[by_save.pk, by_insert.pk])}
    a, b = model_to_dict(stored[by_save.pk]), model_to_dict(stored[by_insert.pk])

    def same(row):  # all but the id and the moment it was written
        return {k: v for k, v in row.items() if k != "id" and not k.endswith("_at")}

    assert same(a) == same(b)
    assert stored[by_insert.pk].created_at is not None  # auto_now_add ran

    reply = insert_row(
        OutboundMessage(
            kind="reply", turn=by_insert, chat=chat, telegram_chat_id=42, payload={"ü": [1]}
        )
    )
    reply.refresh_from_db()
    assert reply.payload == {"ü": [1]} and reply.message_ids == []


def test_insert_row_raises_integrity_errors_like_save():
    insert_row(ProcessedUpdate(bot_id=1, update_id=7, kind="message", outcome="stored"))
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_row(ProcessedUpdate(bot_id=1, update_id=7, kind="message", outcome="stored"))
    assert ProcessedUpdate.objects.filter(bot_id=1, update_id=7).count() == 1


def test_insert_rows_writes_what_save_writes_for_each_row_in_order():
    from chats.rows import insert_rows

    result = message_ingest(channel="web", chat_id="rows", user_id="u1", text="hi", message_id=1)
    chat, message = result.chat, result.message
    by_save = Turn.objects.create(chat=chat, trigger=message)
    others = [
        message_ingest(channel="web", chat_id=f"rows-{i}", user_id="u1", text="hi").message
        for i in range(3)
    ]
    inserted = insert_rows([Turn(chat=m.chat, trigger=m) for m in others])
    assert [turn.trigger_id for turn in inserted] == [m.pk for m in others]
    assert all(turn.pk and not turn._state.adding for turn in inserted)
    for turn in inserted:  # each id names the row of its own trigger
        stored = Turn.objects.get(pk=turn.pk)
        assert (stored.chat_id, stored.trigger_id) == (turn.trigger.chat_id, turn.trigger_id)
        row = {k: v for k, v in model_to_dict(stored).items() if k not in ("id", "chat", "trigger")}
        expected = model_to_dict(by_save)
        assert row == {k: v for k, v in expected.items() if k not in ("id", "chat", "trigger")} | {
            k: v for k, v in row.items() if k.endswith("_at")
        }
    assert insert_rows([]) == []
