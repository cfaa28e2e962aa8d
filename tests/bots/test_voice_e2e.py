"""A voice note (and a video) end to end, with nothing faked but Telegram and the model:
espeak-ng's speech encoded as Telegram's OGG/Opus (or in an MP4 video) goes in through the
fake Bot API, the real bot process stores it, a real Celery worker fetches it (the files'
queue) and transcribes it with the hub's local engine (the voice queue), "typing…" shows
while it does, and the agent is asked the spoken words and answers them into the chat."""

import json
import os

import pytest

from attachments.models import Attachment
from chats.models import Message, Turn
from tests.attachments.audio import speech_ogg_opus, speech_video_mp4
from tests.bots.conftest import TelegramLive
from tests.bots.live_bot import BotProcess
from tests.bots.test_end_to_end import final_text, replies_done, wait
from tests.fakes import openai_server as fake_openai
from tests.fakes.telegram_server import private_chat, tg_user

pytestmark = pytest.mark.heavy

ALICE = tg_user(1001, "Alice", username="alice")
SPOKEN = "Please remind me to call my sister tomorrow morning."
WORDS = ("remind", "call", "sister", "tomorrow", "morning")


@pytest.fixture
def telegram_voice_live(transactional_db, fake_llm, fake_telegram, settings, tmp_path):
    """The bot process and a worker that reads the files' and the voice queues."""
    from django.conf import global_settings

    from tests.live import LiveStack

    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    blobs = {"location": str(tmp_path / "attachment-blobs")}
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {"BACKEND": settings.ATTACHMENTS_STORAGE, "OPTIONS": blobs},
    }
    env = {
        "ATTACHMENTS_STORAGE_OPTIONS": json.dumps(blobs),
        **fake_telegram.env(),
        "TELEGRAM_ALLOWED_USERS": ",".join(settings.TELEGRAM_ALLOWED_USERS),
        "TELEGRAM_ALLOWED_CHATS": ",".join(settings.TELEGRAM_ALLOWED_CHATS),
        "TELEGRAM_POLL_TIMEOUT_SECONDS": "1",
        "TELEGRAM_TYPING_INTERVAL_SECONDS": "1",
        # The transcript may take longer than a file's usual wait on a loaded machine.
        "ATTACHMENTS_TURN_WAIT_SECONDS": "240",
        "VOICE_CPU_THREADS": "2",
        "STT_BASE_URL": "",
    }
    stack = LiveStack(
        llm_base_url=fake_llm.base_url, worker_name=f"tgv-{os.getpid()}@%h", extra_env=env
    )
    bot = BotProcess(stack, fake_telegram)
    try:
        stack.start_worker(extra_queues=("files", "voice"))
        bot.start()
        yield TelegramLive(fake_telegram, bot, stack, fake_llm)
    finally:
        bot.stop()
        stack.stop()


def test_a_voice_note_is_transcribed_and_the_agent_answers_its_words(telegram_voice_live):
    tg, llm = telegram_voice_live.tg, telegram_voice_live.llm
    llm.default = fake_openai.echo("re: ")
    tg.push(tg.voice(private_chat(ALICE), ALICE, speech_ogg_opus(SPOKEN), duration=4))

    wait(replies_done(1), 300, "the answer to the voice note")
    stored = Message.objects.get(role="user")
    assert stored.text == "[voice message, 4 s]"
    attachment = Attachment.objects.get(message=stored)
    assert attachment.state == Attachment.State.READY, attachment.failure
    heard = attachment.extracted_text.lower()
    assert all(word in heard for word in WORDS), heard
    # The agent was asked the words, framed as a transcript.
    asked = fake_openai.last_user_text(llm.last_request).lower()
    assert all(word in asked for word in WORDS), asked
    [answer] = [final_text(m) for m in tg.bot_messages(1001)]
    assert "sister" in answer.lower()
    # "typing…" showed while the transcript was being made, before the turn existed.
    turn = Turn.objects.get()
    typing = [
        c
        for c in tg.calls_of("sendChatAction")
        if c.params["chat_id"] == 1001 and c.at < turn.created_at.timestamp()
    ]
    assert typing and all(c.params["action"] == "typing" for c in typing)


def test_a_video_is_downloaded_its_sound_transcribed_and_the_agent_answers_it(
    telegram_voice_live,
):
    """A Telegram video (not a video note): fetched like a document, stored as `video`, its
    sound track transcribed by the hub's engine, the agent asked the words."""
    tg, llm = telegram_voice_live.tg, telegram_voice_live.llm
    llm.default = fake_openai.echo("re: ")
    data = speech_video_mp4(SPOKEN)
    tg.push(tg.video(private_chat(ALICE), ALICE, data, caption="what does she ask?"))

    wait(replies_done(1), 300, "the answer to the video")
    stored = Message.objects.get(role="user")
    assert stored.text == "what does she ask?"
    attachment = Attachment.objects.get(message=stored)
    assert attachment.kind == "video" and attachment.media_type == "video/mp4"
    assert attachment.blob.file.read() == data
    assert attachment.state == Attachment.State.READY, attachment.failure
    heard = attachment.extracted_text.lower()
    assert all(word in heard for word in WORDS), heard
    asked = fake_openai.last_user_text(llm.last_request).lower()
    assert all(word in asked for word in WORDS), asked
