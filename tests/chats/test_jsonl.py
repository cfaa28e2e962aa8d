import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from chats.models import Actor, Chat, Message, MessageEdit
from chats.selectors import chat_history
from chats.services import chat_reset, message_ingest, message_record_edit

pytestmark = [pytest.mark.django_db, pytest.mark.storage]

T0 = datetime(2025, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)


def export(*args) -> str:
    out = io.StringIO()
    call_command("export_chat", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def import_text(text: str, *args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("import_chat", "-", *args, stdin=io.StringIO(text), stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def wipe_history():
    Chat.objects.all().delete()  # cascades to messages and edits
    Actor.objects.all().delete()
    assert not Message.objects.exists() and not MessageEdit.objects.exists()


def snapshot() -> list:
    """Everything a person would notice about the stored history, in history order."""
    chats = []
    for chat in Chat.objects.order_by("chat_key"):
        messages = [
            (
                m.role,
                m.actor.external_id if m.actor else None,
                m.actor.display_name if m.actor else None,
                m.text,
                m.external_id,
                m.source_ts,
                m.created_at,
                m.parts,
                m.metadata,
                m.reply_to.external_id if m.reply_to else None,
                m.token_count,
                m.edited_at,
                [
                    (e.previous_text, e.previous_parts, e.new_text, e.new_parts)
                    + (e.source_ts, e.recorded_at)
                    for e in m.edits.order_by("id")
                ],
            )
            for m in Message.objects.filter(chat=chat).select_related("actor", "reply_to")
        ]
        context = [m.external_id for m in chat_history(chat)]
        chat_fields = (chat.chat_key, chat.channel, chat.external_id, chat.thread_id)
        chat_fields += (chat.kind, chat.title, chat.last_activity_at)
        chats.append((chat_fields, messages, context))
    global_order = list(Message.objects.order_by("id").values_list("external_id", flat=True))
    return [chats, global_order]


@pytest.fixture
def history():
    """A Telegram group with a forum topic and a web room: authors, a reply, a tool result,
    edits, a reset marker, a summary, Chinese text."""
    group = dict(channel="telegram", chat_id=-100123, chat_kind="group", chat_title="研发群")
    first = message_ingest(
        **group,
        user_id=42,
        user_name="张伟",
        message_id=1,
        text="大家好，今天部署吗？",
        source_ts=T0,
    ).message
    message_ingest(
        **group,
        user_id=None,
        role="assistant",
        message_id="hermes-a1",
        text="可以，先跑测试。",
        parts=[{"type": "text", "text": "可以，先跑测试。"}],
        reply_to_message_id=1,
        metadata={"turn": 1, "model": "fake"},
    )
    edited = message_ingest(
        **group,
        user_id="7",
        user_name="Bob",
        message_id=2,
        text="deploy at 5",
        source_ts=T0 + timedelta(minutes=2),
        reply_to_message_id=1,
    ).message
    message_record_edit(message=edited, text="deploy at 6", source_ts=T0 + timedelta(minutes=3))
    message_record_edit(
        message=edited, text="deploy at 6:30", parts=[{"type": "text", "text": "6:30"}]
    )
    message_ingest(
        **group,
        user_id=None,
        role="tool",
        message_id="hermes-t1",
        text='{"ok": true}',
        parts=[{"type": "tool-result", "toolCallId": "c1", "output": {"ok": True}}],
        metadata={"tool": "deploy_status", "call_id": "c1"},
    )
    chat = first.chat
    chat_reset(chat=chat, actor=first.actor)
    message_ingest(
        **group,
        user_id=None,
        role="summary",
        message_id="hermes-s1",
        text="张伟问部署；Bob 定在 6:30。",
        metadata={"covers": {"from": "1", "to": "hermes-t1"}},
    )
    message_ingest(
        channel="telegram",
        chat_id=-100123,
        thread_id=9,
        user_id=42,
        user_name="张伟",
        message_id=3,
        text="topic message",
        source_ts=T0 + timedelta(hours=1),
    )
    message_ingest(
        channel="web",
        chat_id="team-room",
        chat_title="Team room",
        user_id="olivia",
        user_name="Olivia",
        message_id="w1",
        text="hello from the web",
    )
    message_ingest(**group, user_id=42, message_id=4, text="谢谢！")
    return chat


def test_round_trip_into_empty_database_is_identical_and_idempotent(history):
    before = snapshot()
    exported = export("--all")
    count = len(exported.splitlines())
    assert count == Message.objects.count() == 9

    wipe_history()
    out, err = import_text(exported)

    assert f"{count} new, 0 duplicates, 0 bad lines skipped" in out and err == ""
    assert snapshot() == before

    out, _ = import_text(exported)
    assert f"0 new, {count} duplicates" in out
    assert snapshot() == before
    assert export("--all") == exported


def test_export_writes_one_readable_record_per_message_in_history_order(history):
    exported = export(history.chat_key)

    assert "大家好" in exported and "\\u" not in exported  # Chinese stays readable
    records = [json.loads(line) for line in exported.splitlines()]
    assert [r["message_id"] for r in records] == [
        "1",
        "hermes-a1",
        "2",
        "hermes-t1",
        records[4]["message_id"],
        "hermes-s1",
        "4",
    ]
    first, answer, edited, _, marker, summary, _ = records
    assert first == first | {
        "v": 1,
        "channel": "telegram",
        "chat_id": "-100123",
        "thread_id": None,
        "chat_kind": "group",
        "chat_title": "研发群",
        "user_id": "42",
        "user_name": "张伟",
        "role": "user",
        "content": "大家好，今天部署吗？",
        "ts": "2025-03-01T09:30:15.123456Z",
        "source_ts": "2025-03-01T09:30:15.123456Z",
        "reply_to": None,
        "edits": [],
    }
    assert first["stored_at"].endswith("Z") and first["token_count"] > 0
    assert answer["user_id"] is None and answer["user_name"] is None
    assert answer["reply_to"] == "1" and answer["ts"] == answer["stored_at"]
    assert answer["metadata"] == {"turn": 1, "model": "fake"}
    assert edited["content"] == "deploy at 6:30"
    assert [(e["previous_text"], e["new_text"]) for e in edited["edits"]] == [
        ("deploy at 5", "deploy at 6"),
        ("deploy at 6", "deploy at 6:30"),
    ]
    assert edited["edits"][0]["source_ts"] == "2025-03-01T09:33:15.123456Z"
    assert marker["role"] == "marker" and marker["metadata"] == {"marker": "reset"}
    assert marker["user_id"] == "42"
    assert summary["role"] == "summary"


def test_export_to_a_file_is_utf8(history, tmp_path):
    path = tmp_path / "chat.jsonl"
    out = io.StringIO()
    call_command("export_chat", history.chat_key, "-o", str(path), stdout=out)

    assert "Exported 7 messages" in out.getvalue()
    lines = path.read_bytes().decode("utf-8").splitlines()
    assert len(lines) == 7 and "研发群" in lines[0]


def test_export_of_an_unknown_chat_is_a_command_error(history):
    with pytest.raises(CommandError, match="no chat with key"):
        export("telegram:does-not-exist")
    with pytest.raises(CommandError, match="either a chat_key or --all"):
        export()


def test_large_message_and_chinese_text_round_trip_through_a_file(tmp_path):
    big = ("第一段：长消息。 " + "word " * 40_000 + "\n") * 10  # about 2 MB
    tricky = 'line one\r\nline two\u2028after a line separator\u2029\t"quoted" \\ 😀'
    message_ingest(channel="api", chat_id="big", user_id="u", message_id="m1", text=big)
    message_ingest(channel="api", chat_id="big", user_id="u", message_id="m2", text=tricky)
    before = snapshot()
    path = tmp_path / "big.jsonl"
    call_command("export_chat", "api:big", "-o", str(path), stdout=io.StringIO())

    wipe_history()
    out = io.StringIO()
    call_command("import_chat", str(path), stdout=out, stderr=io.StringIO())

    assert "2 new, 0 duplicates" in out.getvalue()
    assert snapshot() == before
    assert Message.objects.get(external_id="m1").text == big
    assert Message.objects.get(external_id="m2").text == tricky


def record(**changes) -> str:
    base = {
        "v": 1,
        "channel": "api",
        "chat_id": "imported",
        "thread_id": None,
        "user_id": "u1",
        "user_name": "Una",
        "message_id": "m1",
        "ts": "2025-01-01T10:00:00+02:00",
        "role": "user",
        "content": "hello",
    }
    base.update(changes)
    return json.dumps({k: v for k, v in base.items() if v is not ...}, ensure_ascii=False)


def test_a_minimal_record_imports_and_derived_values_are_recomputed():
    out, _ = import_text(record(token_count=9999) + "\n")

    message = Message.objects.select_related("chat", "actor").get()
    assert "1 new" in out
    assert message.source_ts == datetime(2025, 1, 1, 8, 0, tzinfo=UTC)
    assert message.token_count == 1  # recomputed, not the 9999 of the file
    assert message.chat.chat_key == "api:imported" and message.chat.kind == "api"
    assert message.actor.display_name == "Una"


def test_bad_lines_are_reported_with_their_number_and_skipped():
    lines = [
        "{not json",
        record(role=...),
        record(chat_id=["a"]),
        record(role="wizard"),
        record(ts="2025-01-01T10:00:00"),
        "",
        record(message_id="good", content="我很好"),
        record(v=2),
        '{"v": 1, "channel": "api", "chat_id": "x", "user_id": null, "message_id": "n", '
        '"ts": "2025-01-01T00:00:00Z", "role": "user", "content": "x", "metadata": NaN}',
        record(edits=[{"previous_text": "a", "new_text": "b", "recorded_at": T0.isoformat()}]),
        "[1, 2]",
        record(content="nul \x00 byte"),
    ]
    out, err = import_text("\n".join(lines) + "\n")

    assert "1 new, 0 duplicates, 10 bad lines skipped" in out
    reported = err.splitlines()
    assert [line.split(":")[0] for line in reported] == [
        f"line {n}" for n in (1, 2, 3, 4, 5, 8, 9, 10, 11, 12)
    ]
    assert "not JSON" in reported[0]
    assert "missing field role" in reported[1]
    assert "chat_id must be a string or an integer" in reported[2]
    assert "unknown role 'wizard'" in reported[3]
    assert "naive timestamp" in reported[4]
    assert "unsupported format version" in reported[5]
    assert "NaN" in reported[6]
    assert "last edit does not lead to content" in reported[7]
    assert "JSON object" in reported[8]
    assert "NUL" in reported[9]
    assert list(Message.objects.values_list("external_id", "text")) == [("good", "我很好")]


def test_invalid_utf8_in_a_file_is_a_bad_line(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(
        record(message_id="a").encode()
        + b"\n"
        + b'{"content": "\xff\xfe"}\n'
        + record(message_id="b").encode()
        + b"\n"
    )
    out, err = io.StringIO(), io.StringIO()
    call_command("import_chat", str(path), stdout=out, stderr=err)

    assert "2 new, 0 duplicates, 1 bad lines skipped" in out.getvalue()
    assert err.getvalue().startswith("line 2: not valid UTF-8")


def test_strict_import_stores_nothing_when_any_line_is_bad():
    lines = [record(message_id="a"), record(message_id="b"), "oops", record(ts="yesterday")]
    with pytest.raises(CommandError, match="nothing stored: 2 bad lines"):
        import_text("\n".join(lines), "--strict")

    assert not Message.objects.exists() and not Chat.objects.exists()
    assert not Actor.objects.exists()

    out, err = import_text("\n".join(lines[:2]), "--strict")
    assert "2 new, 0 duplicates" in out and err == ""


def test_import_into_a_live_chat_keeps_its_title_names_and_activity():
    message_ingest(
        channel="api",
        chat_id="imported",
        chat_title="Current title",
        user_id="u1",
        user_name="Una Renamed",
        message_id="live",
        text="newest",
    )
    chat = Chat.objects.get()
    activity = chat.last_activity_at
    old = record(
        chat_title="Old title",
        user_name="Una",
        message_id="old",
        stored_at="2025-01-01T08:00:01Z",
    )

    out, _ = import_text(old)

    chat.refresh_from_db()
    assert "1 new" in out
    assert chat.title == "Current title" and chat.last_activity_at == activity
    assert Actor.objects.get().display_name == "Una Renamed"
    assert list(chat.messages.values_list("external_id", flat=True)) == ["live", "old"]


def test_import_file_errors_are_command_errors(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        call_command("import_chat", str(tmp_path / "missing.jsonl"))


def test_timestamps_on_import_keep_their_instant_and_the_chat_its_dates():
    lines = [
        record(message_id="1", ts="2024-06-01T12:00:00+08:00", stored_at="2024-06-01T04:00:01Z"),
        record(message_id="2", ts="2024-06-02T12:00:00Z", stored_at="2024-06-02T12:00:01Z"),
    ]
    import_text("\n".join(lines))

    chat = Chat.objects.get()
    first, second = chat.messages.all()
    assert first.source_ts == datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
    assert first.created_at == datetime(2024, 6, 1, 4, 0, 1, tzinfo=UTC)
    assert chat.created_at == first.created_at
    assert chat.last_activity_at == second.created_at
    assert chat.last_activity_at < timezone.now() - timedelta(days=300)


def test_actor_namespaces_round_trip_so_integrations_stay_apart():
    for namespace, name in [("owner:1", "U1 of one token"), ("owner:2", "U1 of another")]:
        message_ingest(
            channel="api",
            chat_id="shared-id",
            user_id="u1",
            user_name=name,
            actor_namespace=namespace,
            text=f"hello from {name}",
            message_id=f"m-{namespace}",
        )
    text = export("api:shared-id")
    assert [json.loads(line).get("user_namespace") for line in text.splitlines()] == [
        "owner:1",
        "owner:2",
    ]
    wipe_history()

    import_text(text)

    assert sorted(Actor.objects.values_list("namespace", "external_id", "display_name")) == [
        ("owner:1", "u1", "U1 of one token"),
        ("owner:2", "u1", "U1 of another"),
    ]
    assert export("api:shared-id") == text


@pytest.mark.parametrize("namespace", ["x" * 65, "bad\nline", " padded"])
def test_a_bad_user_namespace_is_a_bad_line(namespace):
    out, err = import_text(record(user_namespace=namespace) + "\n")
    assert not Message.objects.exists()
    assert "user_namespace" in err
