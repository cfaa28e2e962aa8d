"""The agent hands a file back: the fake model calls `file_send` over real HTTP, the turn's
reply message carries the file (exact bytes, name intact), the history API lists it and
only the chat's readers can download it. Another chat's file cannot be re-sent."""

import base64
from urllib.parse import quote

import pytest

from attachments.models import Attachment, PendingReplyFile
from attachments.services import attachment_store, blobs_sweep
from chats.agent.turns import message_received
from chats.models import ChatMember, Turn
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from tests.fakes import openai_server as fake_openai
from tests.turns import run

pytestmark = pytest.mark.django_db(transaction=True)

CSV = "region,revenue\n华东,1200\nnorth,980\n"


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0)
        yield server


def ask(chat, person, text="make me the report"):
    result = message_ingest(
        channel=chat.channel,
        chat_id=chat.external_id,
        user_id=f"person-{person.pk}",
        user_name=person.username,
        text=text,
        member=person,
    )
    return message_received(result, enqueue=False)


def send(call_id, **arguments):
    return fake_openai.tool_calls([(call_id, "file_send", arguments)])


def tool_results(request) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m.get("tool_call_id")}


@pytest.fixture
def other_chat(outsider):
    chat, _ = chat_get_or_create(channel="web", chat_id="other-room", title="Other room")
    chat_member_ensure(chat=chat, person=outsider, role=ChatMember.Role.OWNER)
    return chat


def test_the_reply_carries_the_file_and_only_readers_download_it(
    fake, team_chat, owner, member, outsider, other_chat, api_for
):
    fake.script(
        send("c1", name="../季度报告.csv", text=CSV, media_type="application/pdf"),
        fake_openai.text("Here is the report."),
    )
    turn = run(ask(team_chat, owner))
    assert turn.reply.text == "Here is the report."
    [attachment] = Attachment.objects.filter(message=turn.reply)
    assert attachment.name == "季度报告.csv"  # folders gone, the Chinese name intact
    assert attachment.media_type == "text/plain"  # sniffed, never the claimed PDF
    assert attachment.declared_type == "application/pdf"
    assert attachment.size == len(CSV.encode())
    with attachment.blob.file.open("rb") as handle:
        assert handle.read() == CSV.encode()
    # The model was told what it attached, in words.
    told = tool_results(fake.requests[-1])["c1"]
    assert told.startswith(f"Attached 季度报告.csv ({len(CSV.encode())} bytes, text/plain)")
    assert not PendingReplyFile.objects.exists()

    # The history API lists it on the reply (the message extras).
    key = quote(team_chat.chat_key, safe="")
    messages = api_for(member).get(f"/api/v1/chats/{key}/messages").json()["messages"]
    reply = next(m for m in messages if m["id"] == turn.reply.pk)
    assert [(f["id"], f["name"], f["size"]) for f in reply["attachments"]] == [
        (attachment.pk, "季度报告.csv", len(CSV.encode()))
    ]

    # A member downloads the exact bytes; an outsider and another chat's owner get 404.
    path = f"/api/v1/attachments/{attachment.pk}"
    response = api_for(member).get(path)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == CSV.encode()
    assert f"filename*=UTF-8''{quote('季度报告.csv')}" in response["Content-Disposition"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert api_for(outsider).get(path).status_code == 404  # also owner of other_chat
    assert ChatMember.objects.filter(chat=other_chat, person=outsider).exists()


def test_base64_files_keep_their_bytes_and_their_order(fake, team_chat, owner, png):
    fake.script(
        send("c1", name="chart.png", base64=base64.b64encode(png).decode()),
        send("c2", name="notes.md", text="# Notes\n"),
        fake_openai.text("Chart and notes attached."),
    )
    turn = run(ask(team_chat, owner))
    files = list(Attachment.objects.filter(message=turn.reply).order_by("id"))
    assert [(f.name, f.kind, f.media_type) for f in files] == [
        ("chart.png", "image", "image/png"),
        ("notes.md", "document", "text/plain"),
    ]
    with files[0].blob.file.open("rb") as handle:
        assert handle.read() == png


def test_another_chats_file_is_refused_and_this_chats_file_is_resent(
    fake, team_chat, owner, outsider, other_chat
):
    theirs = attachment_store(
        message=ask(other_chat, outsider, "secret").trigger, name="secret.txt", data=b"secret"
    )
    mine = attachment_store(
        message=ask(team_chat, owner, "keep this").trigger, name="plan.txt", data=b"the plan"
    )
    Turn.objects.filter(status=Turn.Status.QUEUED).update(status=Turn.Status.COMPLETED)
    fake.script(
        send("c1", name="x.txt", attachment_id=theirs.pk),
        send("c2", name="plan again.txt", attachment_id=mine.pk),
        fake_openai.text("Sent."),
    )
    turn = run(ask(team_chat, owner, "send the files again"))
    results = tool_results(fake.requests[-1])
    assert results["c1"] == f"Error: There is no file #{theirs.pk} in this chat."
    assert results["c2"].startswith("Attached plan again.txt (8 bytes")
    [resent] = Attachment.objects.filter(message=turn.reply)
    assert (resent.name, resent.blob_id) == ("plan again.txt", mine.blob_id)  # same blob


def test_over_the_size_limit_is_refused_before_decoding(fake, team_chat, owner, settings):
    settings.ATTACHMENTS_MAX_FILE_BYTES = 1000
    huge = "A" * 4000  # 3,000 bytes once decoded
    fake.script(
        send("c1", name="big.bin", base64=huge),
        send("c2", name="bad.bin", base64="not base64!"),
        send("c3", name="two.txt", text="a", base64="YQ=="),
        fake_openai.text("Could not attach it."),
    )
    turn = run(ask(team_chat, owner))
    results = tool_results(fake.requests[-1])
    assert results["c1"].startswith("Error: The file is 3.0 kB; a file may have at most 1.0 kB.")
    assert results["c2"].startswith("Error: base64 is not valid base64")
    assert results["c3"] == "Error: Give exactly one of text, base64 or attachment_id."
    assert not Attachment.objects.filter(message=turn.reply).exists()
    assert not PendingReplyFile.objects.exists()


def test_a_pending_files_blob_is_not_swept(fake, team_chat, owner):
    from datetime import timedelta

    from django.utils import timezone

    from attachments.models import Blob
    from attachments.outbound import file_send
    from chats.agent.registry import TurnContext

    turn = ask(team_chat, owner)
    file_send(
        TurnContext(chat=team_chat, trigger=turn.trigger, turn=turn),
        {"name": "wait.txt", "text": "waiting for the reply"},
    )
    Blob.objects.update(created_at=timezone.now() - timedelta(days=2))
    assert blobs_sweep() == 0
    assert PendingReplyFile.objects.get().blob.file.storage.exists(
        PendingReplyFile.objects.get().blob.file.name
    )


def running(turn):
    Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.RUNNING)
    turn.refresh_from_db()
    return turn


def test_a_turn_without_a_reply_drops_its_files(team_chat, owner):
    from attachments.outbound import file_send
    from chats.agent.registry import TurnContext
    from chats.agent.turns import turn_finish

    turn = running(ask(team_chat, owner))
    file_send(
        TurnContext(chat=team_chat, trigger=turn.trigger, turn=turn),
        {"name": "lost.txt", "text": "never sent"},
    )
    assert turn_finish(turn=turn, status=Turn.Status.FAILED, reply_text=None, error="boom")
    assert not PendingReplyFile.objects.exists()
    assert not Attachment.objects.exists()


def test_a_failing_reply_hook_is_undone_alone_and_the_reply_kept(team_chat, owner):
    from chats.agent.registry import registry
    from chats.agent.turns import turn_finish
    from chats.models import Message

    def broken(turn, reply):
        Message.objects.filter(pk=reply.pk).update(text="rewritten by a broken hook")
        raise RuntimeError("broken hook")

    turn = running(ask(team_chat, owner))
    registry.reply_stored.append(broken)
    try:
        assert turn_finish(turn=turn, status=Turn.Status.COMPLETED, reply_text="kept")
    finally:
        registry.reply_stored.remove(broken)
    reply = Turn.objects.select_related("reply").get(pk=turn.pk).reply
    assert reply.text == "kept"  # the hook's write was rolled back with its savepoint
