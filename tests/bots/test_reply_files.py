"""A reply's files on Telegram, through the fake Bot API over real HTTP (multipart uploads
by python-telegram-bot): the text first, then each file with its own name and bytes; the
receipt names every part's message id. A file Telegram refuses (413) is told in the chat,
recorded failed, and the reply is never marked delivered."""

import asyncio

import pytest
from asgiref.sync import async_to_sync

from attachments.services import attachment_store
from bots.bridge import build_bot
from bots.delivery import ChatGate, ReplyDelivery, Sender
from bots.models import OutboundMessage
from chats.models import Message, Turn
from chats.services import chat_get_or_create, message_append, message_ingest
from chats.signals import reply_delivered, reply_delivery_failed
from tests.attachments.conftest import png_bytes
from tests.fakes.telegram_server import private_chat, tg_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

ALICE = tg_user(1001, "Alice")
CSV = "region,revenue\n华东,1200\n".encode()


@pytest.fixture(autouse=True)
def _blobs_in_a_temporary_folder(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "blobs")},
        },
    }


@pytest.fixture
def receipts():
    heard = []

    def delivered(sender, **kwargs):
        heard.append(("delivered", kwargs))

    def failed(sender, **kwargs):
        heard.append(("failed", kwargs))

    reply_delivered.connect(delivered, weak=False)
    reply_delivery_failed.connect(failed, weak=False)
    yield heard
    reply_delivered.disconnect(delivered)
    reply_delivery_failed.disconnect(failed)


def finished_reply(files: list[tuple[str, bytes]]) -> OutboundMessage:
    """A completed turn in Alice's private chat whose reply carries `files`, and its row."""
    chat, _ = chat_get_or_create(channel="telegram", chat_id="1001", kind="dm")
    trigger = message_ingest(
        channel="telegram", chat_id="1001", user_id=1001, user_name="Alice", text="the report?"
    ).message
    reply = message_append(chat=chat, role=Message.Role.ASSISTANT, text="Here it is.")
    for name, data in files:
        attachment_store(message=reply, name=name, data=data)
    turn = Turn.objects.create(
        chat=chat, trigger=trigger, status=Turn.Status.COMPLETED, reply=reply
    )
    return OutboundMessage.objects.create(kind="reply", turn=turn, chat=chat, telegram_chat_id=1001)


def deliver(row: OutboundMessage) -> None:
    finished = {
        "type": "turn.finished",
        "turn_id": row.turn_id,
        "seq": 1,
        "message": {"text": "Here it is."},
    }

    async def run():
        sender = Sender(build_bot(), ChatGate())
        async with sender.bot:
            queue = asyncio.Queue()
            queue.put_nowait(finished)
            await ReplyDelivery(sender, row, queue).run()

    async_to_sync(run)()


def test_the_text_then_each_file_with_its_name_and_bytes(fake_telegram, receipts):
    fake_telegram.message(private_chat(ALICE), ALICE, "hi")
    png = png_bytes()
    row = finished_reply([("季度报告.csv", CSV), ("chart.png", png)])
    deliver(row)

    [text] = fake_telegram.calls_of("sendMessage")
    [document] = fake_telegram.calls_of("sendDocument")
    [photo] = fake_telegram.calls_of("sendPhoto")
    assert text.params["text"] == "Here it is."
    assert document.params["document"].filename == "季度报告.csv"  # the Chinese name intact
    assert document.params["document"].data == CSV
    assert photo.params["photo"].data == png
    assert text.at <= document.at <= photo.at  # in order, after the text

    row.refresh_from_db()
    ids = [m.message_id for m in fake_telegram.bot_messages(1001)]
    assert row.status == "delivered" and row.message_ids == ids and len(ids) == 3
    [(outcome, heard)] = receipts
    assert outcome == "delivered"
    receipt = heard["receipt"]
    assert receipt["telegram_message_ids"] == ids and receipt["parts"] == 3
    assert [(f["name"], f["state"], f["message_id"]) for f in receipt["files"]] == [
        ("季度报告.csv", "sent", ids[1]),
        ("chart.png", "sent", ids[2]),
    ]


def test_a_refused_upload_is_told_and_never_marked_delivered(fake_telegram, receipts):
    fake_telegram.message(private_chat(ALICE), ALICE, "hi")
    fake_telegram.fail_next("sendDocument", status=413, description="Request Entity Too Large")
    row = finished_reply([("big.csv", CSV), ("small.txt", b"still sent")])
    deliver(row)

    row.refresh_from_db()
    assert row.status == "failed"
    assert "big.csv" in row.error and "Too Large" in row.error
    texts = [m.text for m in fake_telegram.bot_messages(1001)]
    assert texts[0] == "Here it is."
    assert texts[1].startswith("⚠️ Telegram refused the file big.csv")  # the person is told
    sent = [call for call in fake_telegram.calls_of("sendDocument") if call.status == 200]
    assert [call.params["document"].filename for call in sent] == ["small.txt"]
    [(outcome, heard)] = receipts
    assert outcome == "failed"
    files = heard["receipt"]["files"]
    assert [(f["name"], f["state"]) for f in files] == [
        ("big.csv", "failed"),
        ("small.txt", "sent"),
    ]
    assert "message_id" not in files[0]  # the refused part has no delivered message
    assert heard["receipt"]["telegram_message_ids"] == row.message_ids

    # The bridge does not pick it up again: a failed row is not open.
    assert not OutboundMessage.objects.filter(pk=row.pk, status__in=OutboundMessage.OPEN).exists()


def test_a_reply_without_files_is_as_before(fake_telegram, receipts):
    fake_telegram.message(private_chat(ALICE), ALICE, "hi")
    row = finished_reply([])
    deliver(row)
    row.refresh_from_db()
    assert row.status == "delivered" and len(row.message_ids) == 1
    assert fake_telegram.calls_of("sendDocument") == []
    assert "files" not in receipts[0][1]["receipt"]
