"""A file the agent makes reaches Telegram end to end: a person writes to the real bot
process (fake Bot API, real HTTP), the real Celery worker runs the turn, the fake model
calls `file_send`, the reply message stores the file, and the bot sends the text then the
document with its name and exact bytes; the row's ids name both messages."""

import json
import os

import pytest

from attachments.models import Attachment
from bots.models import OutboundMessage
from tests.bots.conftest import TelegramLive
from tests.bots.test_end_to_end import wait
from tests.fakes import openai_server as fake_openai
from tests.fakes.telegram_server import private_chat, tg_user

pytestmark = pytest.mark.timeout(300)

ALICE = tg_user(1001, "Alice")
CSV = "day,errors\n2026-11-27,3\n2026-11-28,0\n"


@pytest.fixture
def telegram_files_live(transactional_db, fake_llm, fake_telegram, settings, tmp_path):
    """`telegram_live` with the blobs in a folder the test, the worker and the bot share."""
    from django.conf import global_settings

    from tests.bots.live_bot import BotProcess
    from tests.live import LiveStack

    blobs = str(tmp_path / "blobs")
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": blobs},
        },
    }
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    env = {
        **fake_telegram.env(),
        "TELEGRAM_ALLOWED_USERS": ",".join(settings.TELEGRAM_ALLOWED_USERS),
        "TELEGRAM_ALLOWED_CHATS": ",".join(settings.TELEGRAM_ALLOWED_CHATS),
        "TELEGRAM_POLL_TIMEOUT_SECONDS": "1",
        "TELEGRAM_EDIT_INTERVAL_SECONDS": "1.0",
        "ATTACHMENTS_STORAGE_OPTIONS": json.dumps({"location": blobs}),
    }
    stack = LiveStack(
        llm_base_url=fake_llm.base_url, worker_name=f"tgf-{os.getpid()}@%h", extra_env=env
    )
    bot = BotProcess(stack, fake_telegram)
    try:
        stack.start_worker()
        bot.start()
        yield TelegramLive(fake_telegram, bot, stack, fake_llm)
    finally:
        bot.stop()
        stack.stop()


def test_the_agents_file_arrives_after_its_text(telegram_files_live):
    tg, llm = telegram_files_live.tg, telegram_files_live.llm
    llm.script(
        fake_openai.tool_calls([("c1", "file_send", {"name": "错误日报.csv", "text": CSV})]),
        fake_openai.text("The error report is attached."),
    )
    tg.send(private_chat(ALICE), ALICE, "send me the error report as a file")

    row = wait(
        lambda: OutboundMessage.objects.filter(kind="reply", status="delivered").first(),
        90,
        "the reply delivered",
    )
    [document] = tg.calls_of("sendDocument")
    assert document.params["document"].filename == "错误日报.csv"
    assert document.params["document"].data == CSV.encode()
    texts = [m.text for m in tg.bot_messages(1001)]
    assert texts[0].startswith("The error report is attached.") and texts[1] == ""
    ids = [m.message_id for m in tg.bot_messages(1001)]
    assert row.message_ids == ids and len(ids) == 2  # the text's id and the document's
    assert row.payload["files"][0]["message_id"] == ids[1]

    [attachment] = Attachment.objects.filter(message=row.turn.reply)
    assert (attachment.name, attachment.size) == ("错误日报.csv", len(CSV.encode()))
    with attachment.blob.file.open("rb") as handle:
        assert handle.read() == CSV.encode()
