"""The worker's history row cache (`chats.agent.rowcache`): a build served from it is exactly
the build read afresh, and any change to the stored history (a new message, an edit, a
deletion, a rename, a summary, a reset, changed metadata), whoever writes it and however,
reaches the next build.

The whole context suite (`test_context.py`) runs again here outside a transaction (the cache
is never used inside one), every build made three times: to fill the cache, from the cache,
and with the cache off; the three must be identical."""

import json
from dataclasses import asdict

import pytest
from django.db import connection

from chats.agent import rowcache
from chats.agent.context import build_context
from chats.agent.convert import INTERRUPTED_NOTE
from chats.agent.history import _HistoryScan
from chats.agent.tokens import count_tokens
from chats.models import HistoryVersion, Message
from chats.services import actor_refresh, chat_reset, message_record_edit
from tests.agent import test_context as suite
from tests.agent.test_context import *  # noqa: F403 (the context suite, collected again here)
from tests.agent.test_context import build, say, sent_text, store, tool_group, words

pytestmark = [pytest.mark.django_db(transaction=True)]

# Counts its section's calls, which the triple builds here multiply; it reads no rows.
del test_sections_learn_where_the_history_starts  # noqa: F821


def snapshot(built) -> str:
    return json.dumps(
        [built.messages, built.report, built.prompt_tokens, asdict(built.budget)],
        sort_keys=True,
        default=str,
    )


@pytest.fixture(autouse=True)
def checked_builds(monkeypatch, settings):
    """Every build_context of the suite: filled, from the cache, afresh; all equal."""
    rowcache.cache.clear()
    settings.CONTEXT_ROW_CACHE = True

    def checked(**kwargs):
        first = build_context(**kwargs)
        hits = rowcache.cache.hits
        second = build_context(**kwargs)
        settings.CONTEXT_ROW_CACHE = False
        try:
            fresh = build_context(**kwargs)
        finally:
            settings.CONTEXT_ROW_CACHE = True
        assert snapshot(first) == snapshot(fresh)
        assert snapshot(second) == snapshot(fresh)
        checked.hits += rowcache.cache.hits - hits
        return second

    checked.hits = 0
    monkeypatch.setattr(suite, "build_context", checked)
    yield checked
    rowcache.cache.clear()


def counted(chat, trigger, **kwargs):
    """A build, and whether its rows came from the cache (True) or were read afresh."""
    hits, misses = rowcache.cache.hits, rowcache.cache.misses
    built = build(chat, trigger, **kwargs)
    served = (rowcache.cache.hits - hits, rowcache.cache.misses - misses)
    assert sum(served) >= 1
    return built, served[0] >= 1 and served[1] == 0


def group_chat(count=30):
    first = say("-300", words(20, seed=1), user="alice", name="Alice", channel="telegram")
    chat = first.chat
    chat.kind = "group"
    chat.save()
    rows = [first]
    for index in range(count):
        if index % 3 == 2:
            rows.append(store(chat, "assistant", words(25, seed=index), metadata={"turn": index}))
        else:
            user, name = ("bob", "Bob") if index % 2 else ("alice", "Alice")
            rows.append(
                say("-300", words(15, seed=index), user=user, name=name, channel="telegram")
            )
    rows.append(say("-300", "so?", user="bob", name="Bob", channel="telegram"))  # the trigger
    return chat, rows


def test_the_cache_serves_the_steady_state_and_reads_only_what_is_new(checked_builds):
    chat, rows = group_chat()
    trigger = rows[-1]
    build(chat, trigger, window=8000)
    _, served = counted(chat, trigger, window=8000)
    assert served  # the rows came from the cache
    assert checked_builds.hits >= 1
    new = say("-300", "and the rollout?", user="bob", name="Bob", channel="telegram")
    built, served = counted(chat, new, window=8000)
    assert served and "[Bob] and the rollout?" in sent_text(built)
    assert f"[Bob] {trigger.text}" in sent_text(built)  # the old trigger is history now


@pytest.mark.parametrize(
    "change",
    ["edit", "update_text", "raw_sql", "delete", "rename", "metadata", "summary", "reset"],
)
def test_any_change_to_the_history_reaches_the_next_build(change, settings):
    chat, rows = group_chat()
    trigger = rows[-1]
    before = build(chat, trigger, window=8000)
    target = rows[7]  # a user message (Alice's), well inside the window
    original = target.text
    assert f"[Alice] {original}" in sent_text(before)
    if change == "edit":
        message_record_edit(message=target, text="edited by its author")
    elif change == "update_text":  # a bulk .update(): no signal, no save()
        Message.objects.filter(pk=target.pk).update(text="edited by an update")
    elif change == "raw_sql":  # another process, another program
        table = connection.ops.quote_name(Message._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET text = %s WHERE id = %s", ["by SQL", target.pk])
    elif change == "delete":
        Message.objects.filter(pk=target.pk).delete()
    elif change == "rename":
        actor_refresh(actor=target.actor, display_name="Alicia")
    elif change == "metadata":
        Message.objects.filter(pk=rows[3].pk).update(metadata={"turn": 3, "interrupted": True})
    elif change == "summary":
        store(
            chat,
            "summary",
            "They agreed on Friday.",
            metadata={"covers_from_id": rows[0].pk, "covers_to_id": rows[10].pk, "messages": 11},
        )
    elif change == "reset":
        chat_reset(chat=chat)
    trigger = say("-300", "what now?", user="bob", name="Bob", channel="telegram")
    after, served = counted(chat, trigger, window=8000)
    # Only new rows (a summary, a reset marker) leave the cached rows valid.
    assert served == (change in ("summary", "reset"))
    settings.CONTEXT_ROW_CACHE = False
    assert snapshot(after) == snapshot(build(chat, trigger, window=8000))
    text = sent_text(after)
    expected = {
        "edit": "[Alice] edited by its author",
        "update_text": "[Alice] edited by an update",
        "raw_sql": "[Alice] by SQL",
        "rename": f"[Alicia] {original}",
        "metadata": INTERRUPTED_NOTE,
        "summary": "They agreed on Friday.",
    }
    if change in expected:
        assert expected[change] in text
    if change not in ("rename", "metadata"):
        assert original not in text


def test_a_row_committed_late_inside_the_cached_range_is_read():
    """On PostgreSQL an id is handed out before the commit: a row can appear below ids
    already read. The count of the cached range catches it (an INSERT changes no version)."""
    chat, rows = group_chat()
    gap = rows[5]
    Message.objects.filter(pk=gap.pk).delete()
    trigger = rows[-1]
    before = build(chat, trigger, window=8000)
    assert gap.text not in sent_text(before)
    late = Message(
        id=gap.pk, chat=chat, actor=gap.actor, role="user", text="a late arrival",
        external_id="late", token_count=gap.token_count,
    )  # fmt: skip
    late.token_count = count_tokens(late.text)
    late.save(force_insert=True)
    after, served = counted(chat, trigger, window=8000)
    assert not served and "a late arrival" in sent_text(after)


def test_two_workers_never_serve_each_other_a_stale_history():
    """Two caches (two worker processes) over one database: what one worker's turn stores or
    edits, the other's next build sees, with no message between them but the database."""
    chat, rows = group_chat()
    worker_a, worker_b = rowcache.RowCache(), rowcache.RowCache()

    def rows_seen(cache, trigger):
        scan = _HistoryScan(chat, start_id=0, trigger_id=trigger.pk, end_id=None, turn=None)
        original = rowcache.cache
        rowcache.cache = cache
        try:
            seen = {row.id: (row.text, row.actor_name) for row in scan}
        finally:
            scan.done()
            rowcache.cache = original
        return seen

    trigger = rows[-1]
    assert rows_seen(worker_a, trigger) == rows_seen(worker_b, trigger)
    message_record_edit(message=rows[2], text="worker B's turn edited this")  # via B
    seen_a = rows_seen(worker_a, trigger)
    assert seen_a[rows[2].pk][0] == "worker B's turn edited this"
    assert worker_a.misses == 2 and worker_a.hits == 0
    reply = store(chat, "assistant", "B replied", metadata={"turn": 99})
    trigger = say("-300", "next", user="bob", name="Bob", channel="telegram")
    seen_a = rows_seen(worker_a, trigger)
    assert seen_a[reply.pk][0] == "B replied" and worker_a.hits == 1
    assert seen_a == rows_seen(worker_b, trigger)


def test_memory_and_settings_changes_reach_the_next_build(settings):
    """What the cache does not hold (the system prompt's sections, the shares of the window)
    is computed on every build: a memory section that changes, or new shares, count at once."""

    class Notes:
        name, order, text = "notes", 10, "## Notes\nThe deploy is on Friday."

        def render(self, context):
            return self.text

    chat, rows = group_chat()
    trigger = rows[-1]
    notes = Notes()
    before = build(chat, trigger, window=8000, sections=[notes])
    notes.text = "## Notes\nThe deploy moved to Monday."
    settings.CONTEXT_SHARE_HISTORY = 0.30
    after, served = counted(chat, trigger, window=8000, sections=[notes])
    assert served
    assert "Monday" in after.messages[0]["content"] and "Friday" not in after.messages[0]["content"]
    assert after.report["budget"]["history"] < before.report["budget"]["history"]
    settings.CONTEXT_ROW_CACHE = False
    fresh = build(chat, trigger, window=8000, sections=[notes])
    assert snapshot(after) == snapshot(fresh)


def test_a_longer_window_reads_older_rows_and_a_compression_forgets_them():
    chat, rows = group_chat(count=80)
    trigger = rows[-1]
    small = build(chat, trigger, window=1500)
    assert small.report["older_dropped"] is not None
    large, served = counted(chat, trigger, window=32000)
    assert served and large.report["older_dropped"] is None
    assert f"[Alice] {rows[0].text}" in sent_text(large)
    entry = rowcache.cache.take(chat.pk)
    assert entry is not None and len(entry.rows) == len(rows)  # the trigger's row too
    rowcache.cache.put(chat.pk, entry)
    store(
        chat,
        "summary",
        "Summary.",
        metadata={"covers_from_id": rows[0].pk, "covers_to_id": rows[40].pk, "messages": 41},
    )
    counted(chat, trigger, window=32000)
    entry = rowcache.cache.take(chat.pk)
    assert min(row.id for row in entry.rows) > rows[40].pk


def test_nothing_is_cached_inside_a_transaction_or_for_a_chat_without_a_version():
    from django.db import transaction

    chat, rows = group_chat()
    with transaction.atomic():
        build(chat, rows[-1], window=8000)
    assert rowcache.cache.take(chat.pk) is None
    HistoryVersion.objects.filter(scope=chat.pk).delete()
    build(chat, rows[-1], window=8000)
    assert rowcache.cache.take(chat.pk) is None


def test_each_chat_keeps_only_its_own_rows_within_bounds(monkeypatch):
    monkeypatch.setattr(rowcache, "MAX_ROWS", 10)
    chat, rows = group_chat()
    other = say("-301", "elsewhere", user="carol", name="Carol", channel="telegram")
    build(chat, rows[-1], window=8000)
    build(other.chat, other, window=8000)
    entry = rowcache.cache.take(chat.pk)
    assert len(entry.rows) == 10 and entry.hi == rows[-1].pk
    assert all(row.id > entry.lo for row in entry.rows)
    assert [row.id for row in rowcache.cache.take(other.chat.pk).rows] == [other.pk]
    rowcache.cache.put(chat.pk, entry)
    again, served = counted(chat, rows[-1], window=8000)
    assert served  # the older rows are read again as needed
    assert f"[Alice] {rows[0].text}" in sent_text(again)


def test_tool_groups_and_this_turns_own_steps_from_the_cache():
    chat, rows = group_chat(count=6)
    tool_group(chat, [("c1", "search", {"q": "x"}, "found x")], turn=50)
    store(chat, "assistant", "a notice", metadata={"notice": True})
    trigger = say("-300", "more?", user="bob", name="Bob", channel="telegram")
    build(chat, trigger, window=8000)
    built, served = counted(chat, trigger, window=8000)
    assert served and "found x" in sent_text(built) and "a notice" not in sent_text(built)


def test_a_chat_that_becomes_shared_gets_names_on_its_cached_rows():
    """Cached rows keep their formatted request items per kind of chat: a direct chat turned
    into a group (and back) is formatted anew, from the cache."""
    first = say("-302", "hello there", user="alice", name="Alice", channel="telegram", kind="dm")
    chat = first.chat
    store(chat, "assistant", "hi Alice", metadata={"turn": 1})
    trigger = say("-302", "still there?", user="alice", name="Alice", channel="telegram")
    assert "[Alice]" not in sent_text(build(chat, trigger))
    chat.kind = "group"
    chat.save()
    shared, served = counted(chat, trigger)
    assert served and "[Alice] hello there" in sent_text(shared)
    chat.kind = "dm"
    chat.save()
    direct, served = counted(chat, trigger)
    assert served and "[Alice]" not in sent_text(direct)


def test_a_chat_back_after_many_new_messages_is_read_afresh(monkeypatch):
    monkeypatch.setattr(rowcache, "MAX_NEW", 3)
    chat, rows = group_chat()
    build(chat, rows[-1], window=8000)
    for index in range(5):
        say("-300", f"news {index}", user="bob", name="Bob", channel="telegram")
    trigger = say("-300", "and now?", user="alice", name="Alice", channel="telegram")
    built, _ = counted(chat, trigger, window=8000)  # compared with a fresh build
    assert "[Bob] news 4" in sent_text(built) and f"[Alice] {rows[1].text}" in sent_text(built)
    entry = rowcache.cache.take(chat.pk)
    assert entry.rows[0].id == trigger.pk and all(row.id > entry.lo for row in entry.rows)


def test_the_least_recently_built_chat_leaves_first_when_the_rows_add_up(monkeypatch):
    chat, rows = group_chat()
    other = say("-303", "elsewhere", user="carol", name="Carol", channel="telegram")
    monkeypatch.setattr(rowcache, "MAX_TOTAL_ROWS", len(rows))
    build(chat, rows[-1], window=8000)
    assert rowcache.cache.take(chat.pk) is not None
    build(chat, rows[-1], window=8000)
    build(other.chat, other, window=8000)  # one row more than the cap: the older chat goes
    assert rowcache.cache.take(chat.pk) is None
    assert rowcache.cache.take(other.chat.pk) is not None
