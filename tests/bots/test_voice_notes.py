"""Voice notes, audio files and video notes sent on Telegram, through the fake Bot API
server: stored as attachments like documents (real OGG/Opus bytes spoken by espeak-ng),
"typing…" while their transcript is made, a failure told with the audio kept, and in a
group the transcript deciding whether the bot was addressed. The transcript here comes from
a processor the test registers for audio (the engine's boundary: `attachments.processing`),
so these tests are about the channel, whatever engine the hub runs."""

from datetime import timedelta

import pytest
from django.utils import timezone

from attachments.models import Attachment
from attachments.processing import Derived, ProcessingFailed
from attachments.telegram import telegram_file_fetch
from attachments.telegram_voice import names_bot, transcribing_chat_actions
from bots.chat_actions import pending_chat_actions
from bots.models import OutboundMessage
from bots.services import bot_state_save
from chats.agent.holds import turn_holds_release_due
from chats.models import Chat, Message, Turn, TurnHold
from tests.attachments.audio import speech_ogg_opus, speech_video_mp4
from tests.bots.conftest import BOT, GROUP_ID, process
from tests.fakes.telegram_server import group_chat, private_chat, tg_user

pytestmark = pytest.mark.django_db(transaction=True)

ALICE = tg_user(1001, "Alice", username="alice")
BOB = tg_user(1002, "Bob")
SPOKEN = "what is the weather in paris"


class Transcriber:
    """A processor of audio and video files that answers the transcript the test set (or
    fails with the reason it set), standing in for the engine."""

    def __init__(self):
        self.text = SPOKEN
        self.failure = ""
        self.runs = 0

    def wants(self, attachment) -> bool:
        return attachment.kind in ("audio", "video")

    def run(self, attachment) -> Derived:
        self.runs += 1
        if self.failure:
            raise ProcessingFailed(self.failure)
        return Derived(extracted_text=self.text)


@pytest.fixture
def transcriber(monkeypatch):
    """The only processor of audio (the hub's own are set aside for the test)."""
    from attachments import processing

    engine = Transcriber()
    processors = {name: p for name, p in processing._processors.items() if name in ("documents",)}
    processors["test-transcriber"] = processing.Processor(
        "test-transcriber", engine.wants, engine.run
    )
    monkeypatch.setattr(processing, "_processors", processors)
    return engine


@pytest.fixture(autouse=True)
def _blobs_and_fetches(settings, tmp_path, monkeypatch):
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "blobs")},
        },
    }
    monkeypatch.setattr(
        "attachments.telegram.fetch_telegram_file.delay", lambda pk: telegram_file_fetch(pk)
    )
    settings.TELEGRAM_BOT_TOKEN = f"{BOT.bot_id}:test-token"
    bot_state_save(identity=BOT)


@pytest.fixture
def queued(monkeypatch):
    """Files wait in the files' queue (no worker): they stay `pending`."""
    from attachments.processing import PROCESS_TASK

    sent = []

    def send_task(name, args=(), **kwargs):
        if name == PROCESS_TASK:  # the files' work (not the holds' timers)
            sent.append(args)

    monkeypatch.setattr("attachments.services.current_app.send_task", send_task)
    return sent


def _notices(chat: Chat) -> list[str]:
    return list(chat.messages.filter(metadata__notice__isnull=False).values_list("text", flat=True))


def _deadline_passes():
    past = timezone.now() - timedelta(milliseconds=1)
    TurnHold.objects.filter(state=TurnHold.State.HELD).update(not_before=past, deadline=past)
    return turn_holds_release_due()


@pytest.mark.usefixtures("files_processed_inline")
def test_a_private_voice_note_is_stored_as_audio_and_answered_after_its_transcript(
    fake_telegram, transcriber
):
    voice = speech_ogg_opus(SPOKEN)
    outcome = process(fake_telegram.voice(private_chat(ALICE), ALICE, voice, duration=2))

    message = Message.objects.get()
    assert message.text == "[voice message, 2 s]"  # the label stays the message's own text
    attachment = Attachment.objects.get()
    assert attachment.kind == "audio" and attachment.media_type == "audio/ogg"
    assert attachment.blob.file.read() == voice  # exactly what Telegram sent
    assert attachment.name.startswith("voice_") and attachment.name.endswith(".oga")
    assert attachment.state == Attachment.State.READY and attachment.extracted_text == SPOKEN
    # The turn waited for the transcript: one turn, one streamed reply.
    assert outcome.result == "held"
    turn = Turn.objects.get()
    assert turn.trigger_id == message.pk
    assert OutboundMessage.objects.get(kind=OutboundMessage.Kind.REPLY).turn_id == turn.pk
    assert _notices(message.chat) == []


@pytest.mark.usefixtures("files_processed_inline")
@pytest.mark.parametrize("kind", ["audio", "video_note"])
def test_audio_files_and_video_notes_become_attachments_too(fake_telegram, transcriber, kind):
    data = speech_ogg_opus("good morning")
    process(fake_telegram.voice(private_chat(ALICE), ALICE, data, kind=kind))
    attachment = Attachment.objects.get()
    assert attachment.blob.file.read() == data and attachment.extracted_text == SPOKEN
    assert Message.objects.get().text == ("[audio Talk]" if kind == "audio" else "[video message]")
    assert Turn.objects.count() == 1


@pytest.mark.usefixtures("files_processed_inline")
def test_a_video_is_downloaded_stored_as_video_and_its_sound_transcribed(
    fake_telegram, transcriber
):
    data = speech_video_mp4("good morning")
    outcome = process(
        fake_telegram.video(private_chat(ALICE), ALICE, data, caption="what do they say?")
    )
    message = Message.objects.get()
    assert message.text == "what do they say?"  # the caption; the file is not in the text
    attachment = Attachment.objects.get()
    assert (attachment.name, attachment.kind, attachment.media_type) == (
        "clip.mp4",
        "video",
        "video/mp4",
    )
    assert attachment.blob.file.read() == data and attachment.extracted_text == SPOKEN
    assert transcriber.runs == 1
    assert outcome.result == "held" and Turn.objects.get().trigger_id == message.pk
    # Without a caption, the label stays the message's own text.
    process(fake_telegram.video(private_chat(ALICE), ALICE, data, file_name=None))
    assert Message.objects.order_by("-id").first().text == "[video]"


def test_typing_shows_while_a_video_is_transcribed_and_a_failure_is_told(
    fake_telegram, transcriber, queued
):
    process(fake_telegram.video(private_chat(ALICE), ALICE, speech_video_mp4("one")))
    assert [(a.telegram_chat_id, a.action) for a in pending_chat_actions()] == [
        (ALICE["id"], "typing")
    ]
    from attachments.services import attachment_process

    transcriber.failure = "The recording is longer than 30 minutes."
    attachment_process(*queued[0])
    assert _notices(Chat.objects.get()) == [
        "The sound of your video could not be transcribed: The recording is longer than 30 "
        "minutes. The video is kept; send it again or write the message."
    ]
    assert Attachment.objects.get().blob is not None and Turn.objects.count() == 1


@pytest.mark.usefixtures("files_processed_inline")
def test_a_group_video_is_addressed_by_its_caption_not_by_its_sound(fake_telegram, transcriber):
    transcriber.text = "Hermes test bot, what is the weather in Paris?"
    group = group_chat(GROUP_ID, "Ops")
    process(fake_telegram.video(group, BOB, speech_video_mp4("hermes test bot")))
    assert Attachment.objects.get().extracted_text == transcriber.text
    assert Turn.objects.count() == 0 and OutboundMessage.objects.count() == 0
    process(fake_telegram.video(group, BOB, speech_video_mp4("hi"), caption="@hermes_test_bot ?"))
    assert Turn.objects.count() == 1


def test_typing_shows_while_a_voice_note_is_downloaded(fake_telegram, monkeypatch):
    monkeypatch.setattr("attachments.telegram.fetch_telegram_file.delay", lambda pk: None)
    process(fake_telegram.voice(private_chat(ALICE), ALICE, speech_ogg_opus("one")))
    process(fake_telegram.voice(group_chat(GROUP_ID, "Ops"), BOB, speech_ogg_opus("two")))
    assert Attachment.objects.count() == 0  # not fetched yet
    assert [(a.telegram_chat_id, a.action) for a in pending_chat_actions()] == [
        (ALICE["id"], "typing")
    ]
    TurnHold.objects.update(state=TurnHold.State.RELEASED)
    assert pending_chat_actions() == []


def test_typing_shows_while_a_waiting_persons_voice_note_is_transcribed(
    fake_telegram, transcriber, queued, settings
):
    process(fake_telegram.voice(private_chat(ALICE), ALICE, speech_ogg_opus("one")))
    group = group_chat(GROUP_ID, "Ops")
    process(fake_telegram.voice(group, BOB, speech_ogg_opus("two")))  # not for the bot (yet)

    assert Attachment.objects.filter(state=Attachment.State.PENDING).count() == 2
    actions = pending_chat_actions()
    assert [(a.telegram_chat_id, a.thread_id, a.action) for a in actions] == [
        (ALICE["id"], None, "typing")
    ]
    # Bounded: a transcript stuck for longer than the setting shows nothing any more.
    settings.TELEGRAM_TRANSCRIBING_ACTION_SECONDS = 60
    Attachment.objects.update(created_at=timezone.now() - timedelta(seconds=61))
    TurnHold.objects.update(created_at=timezone.now() - timedelta(seconds=61))
    assert transcribing_chat_actions() == []


def test_a_failed_transcript_is_told_and_the_audio_kept(
    fake_telegram, transcriber, files_processed_inline
):
    transcriber.failure = "The audio has no speech in it."
    voice = speech_ogg_opus("hmm")
    process(fake_telegram.voice(private_chat(ALICE), ALICE, voice))

    attachment = Attachment.objects.get()
    assert attachment.state == Attachment.State.FAILED
    assert attachment.blob.file.read() == voice  # the audio is kept
    chat = attachment.message.chat
    assert _notices(chat) == [
        "Your voice message could not be transcribed: The audio has no speech in it. "
        "The audio is kept; send it again or write the message."
    ]
    # The bridge sends the notice to Telegram; the message still gets its turn.
    assert OutboundMessage.objects.filter(kind=OutboundMessage.Kind.SEND).count() == 1
    assert Turn.objects.count() == 1


@pytest.mark.usefixtures("files_processed_inline")
def test_a_group_voice_note_that_names_the_bot_is_answered(fake_telegram, transcriber):
    transcriber.text = "Hermes test bot, what is the weather in Paris?"
    group = group_chat(GROUP_ID, "Ops")
    process(fake_telegram.voice(group, BOB, speech_ogg_opus(transcriber.text)))

    message = Message.objects.get()
    assert message.metadata["telegram"]["addressed"] is True
    assert message.metadata["telegram"]["addressed_by"] == "transcript"
    turn = Turn.objects.get()
    reply = OutboundMessage.objects.get(kind=OutboundMessage.Kind.REPLY)
    assert reply.turn_id == turn.pk and reply.telegram_chat_id == GROUP_ID
    assert reply.reply_to_message_id == message.metadata["telegram"]["message_id"]


@pytest.mark.usefixtures("files_processed_inline")
def test_a_group_voice_note_not_for_the_bot_is_kept_unanswered_and_untold(
    fake_telegram, transcriber
):
    transcriber.text = "the hermes project ships on friday, robot"  # no name of the bot
    group = group_chat(GROUP_ID, "Ops")
    process(fake_telegram.voice(group, BOB, speech_ogg_opus(transcriber.text)))
    assert Turn.objects.count() == 0 and OutboundMessage.objects.count() == 0
    assert Attachment.objects.get().extracted_text == transcriber.text
    # A failed transcript of a voice note nobody addressed to the bot is not told either.
    transcriber.failure = "The audio could not be decoded."
    process(fake_telegram.voice(group, BOB, b"OggS not really"))
    assert OutboundMessage.objects.count() == 0
    assert _notices(Chat.objects.get()) == []


@pytest.mark.usefixtures("files_processed_inline")
def test_a_group_voice_note_replying_to_the_bot_is_answered_whatever_it_says(
    fake_telegram, transcriber
):
    transcriber.text = "sounds good"
    group = group_chat(GROUP_ID, "Ops")
    bot_message = {
        "message_id": 500,
        "from": {"id": BOT.bot_id, "is_bot": True, "first_name": "Hermes"},
        "chat": group,
        "date": 0,
        "text": "Shall I book it?",
    }
    update = fake_telegram.voice(group, BOB, speech_ogg_opus("sounds good"), reply_to=bot_message)
    process(update)
    assert Turn.objects.count() == 1
    assert Message.objects.get().metadata["telegram"].get("addressed_by") is None


def test_a_transcript_naming_the_bot_after_the_holds_deadline_is_answered_then(
    fake_telegram, transcriber, queued
):
    transcriber.text = "hey hermes test, are you there"
    group = group_chat(GROUP_ID, "Ops")
    process(fake_telegram.voice(group, BOB, speech_ogg_opus(transcriber.text)))
    # Transcribing takes longer than the hold's bound: released, nobody asked the bot.
    _deadline_passes()
    assert Turn.objects.count() == 0
    # Then the transcript arrives (the files' worker) and names the bot.
    from attachments.services import attachment_process

    attachment_process(*queued[0])
    turn = Turn.objects.get()
    assert OutboundMessage.objects.get(kind=OutboundMessage.Kind.REPLY).turn_id == turn.pk
    # The signal again (a redelivered task) answers nothing twice.
    from attachments.signals import attachment_settled

    attachment_settled.send(sender=Attachment, attachment=Attachment.objects.get())
    assert Turn.objects.count() == 1 and OutboundMessage.objects.count() == 1


@pytest.mark.usefixtures("files_processed_inline")
def test_a_transcript_never_runs_a_slash_command(fake_telegram, transcriber):
    transcriber.text = "/new"
    process(fake_telegram.voice(private_chat(ALICE), ALICE, speech_ogg_opus("slash new")))
    chat = Chat.objects.get()
    # No fresh context was started: the only messages are the voice note (and no marker).
    assert list(chat.messages.values_list("role", flat=True)) == ["user"]
    assert Turn.objects.get().trigger.text == "[voice message, 3 s]"


def test_a_voice_note_over_telegrams_20_mb_is_told_and_the_message_kept(
    fake_telegram, transcriber, files_processed_inline
):
    process(
        fake_telegram.voice(private_chat(ALICE), ALICE, None, size=25 * 1024 * 1024, duration=900)
    )
    assert fake_telegram.downloads == []
    missing = Attachment.objects.get()  # recorded, never received, nothing to transcribe
    assert missing.kind == "audio" and missing.blob is None and not missing.received
    assert missing.failure.startswith("Could not be fetched from Telegram: it is 25.0 MB")
    chat = Chat.objects.get()
    assert _notices(chat) == [
        "The voice message is 25.0 MB: Telegram lets a bot download files of at most 20 MB. "
        "Send a smaller file (or a link to it). The message was kept without it."
    ]
    assert Turn.objects.count() == 1  # answered without the audio


@pytest.mark.parametrize(
    ("transcript", "named"),
    [
        ("Hermes test bot, what time is it?", True),
        ("hey HERMES-TEST-BOT", True),
        ("ask @hermes_test_bot about it", True),
        ("hermes test, are you there", True),
        ("hermes testbots are great", False),  # part of a longer word
        ("hermes is a test", False),
        ("", False),
    ],
)
def test_names_bot(transcript, named):
    assert names_bot(transcript, username="hermes_test_bot") is named


@pytest.mark.usefixtures("files_processed_inline")
def test_a_failure_after_the_transcript_never_keeps_the_turn_held(
    fake_telegram, transcriber, monkeypatch
):
    def broken(**kwargs):
        raise RuntimeError("the bot's identity cannot be read")

    monkeypatch.setattr("attachments.telegram_voice.voice_note_addressed", broken)
    transcriber.text = "hermes test bot, hello"
    process(fake_telegram.voice(private_chat(ALICE), ALICE, speech_ogg_opus("hello")))
    group = group_chat(GROUP_ID, "Ops")
    process(fake_telegram.voice(group, BOB, speech_ogg_opus("hello")))
    # The private note's turn went; the group's hold was released, nothing lost.
    assert Turn.objects.count() == 1
    assert not TurnHold.objects.filter(state=TurnHold.State.HELD).exists()
