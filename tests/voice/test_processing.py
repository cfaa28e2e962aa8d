"""A recording on a message, through the attachments' registry and the voice task: pending,
then `ready` with its words as `extracted_text` and a machine-made `Transcript` (language,
duration, engine, parts), progress sent along the way, on the voice queue; failures with a
reason a person can read and the recording kept; the remote engine (a fake OpenAI-compatible
server) tried first, and the local engine when it fails."""

from pathlib import Path

import av
import numpy as np
import pytest

from attachments.models import Attachment
from attachments.services import attachment_store
from attachments.signals import attachment_settled
from tests.fakes.stt_server import FakeSTT
from tests.voice.speech import (
    CHINESE,
    CHINESE_PINYIN,
    ENGLISH,
    encode,
    voice_note,
    word_error_rate,
)
from voice.models import Transcript
from voice.signals import transcript_progress
from voice.tasks import route_voice, transcribe_attachment
from voice.tasks_names import TRANSCRIBE_TASK

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def enqueued(monkeypatch):
    sent = []
    monkeypatch.setattr(
        "attachments.services.current_app.send_task", lambda name, args: sent.append((name, *args))
    )
    return sent


@pytest.fixture
def progress():
    seen = []

    def receive(sender, transcript, **kwargs):
        seen.append((transcript.parts_done, transcript.parts_total))

    transcript_progress.connect(receive)
    yield seen
    transcript_progress.disconnect(receive)


@pytest.fixture
def settled():
    seen = []

    def receive(sender, attachment, **kwargs):
        seen.append((attachment.pk, attachment.state))

    attachment_settled.connect(receive)
    yield seen
    attachment_settled.disconnect(receive)


def store(say, path, name="voice.ogg", declared="audio/ogg"):
    return attachment_store(
        message=say(""), name=name, data=path.read_bytes(), declared_type=declared
    )


def test_a_voice_note_is_transcribed_on_the_voice_queue(
    say, tmp_path, enqueued, progress, settled, settings
):
    attachment = store(say, voice_note(tmp_path))
    assert attachment.state == Attachment.State.PENDING and attachment.kind == "audio"
    assert enqueued == [(TRANSCRIBE_TASK, attachment.pk)]
    queue = f"{settings.REDIS_KEY_PREFIX}-voice"
    assert route_voice(TRANSCRIBE_TASK, [], {}, {}) == {"queue": queue}
    assert transcribe_attachment(attachment.pk) == "ready"
    attachment.refresh_from_db()
    assert word_error_rate(ENGLISH, attachment.extracted_text) <= 0.25, attachment.extracted_text
    transcript = attachment.transcript
    assert (transcript.language, transcript.engine) == ("en", "local:whisper-base")
    assert transcript.machine_made is True
    assert 5 < transcript.duration_seconds < 15
    assert (transcript.parts_done, transcript.parts_total) == (1, 1)
    assert progress[0] == (0, 0) and progress[-1] == (1, 1)
    assert settled == [(attachment.pk, "ready")]


def test_a_recording_over_the_limit_fails_clearly_and_is_kept(say, tmp_path, enqueued, settings):
    settings.VOICE_MAX_SECONDS = 2
    attachment = store(say, voice_note(tmp_path))
    assert transcribe_attachment(attachment.pk) == "failed"
    attachment.refresh_from_db()
    assert attachment.failure.startswith("The recording is longer than 2 seconds")
    assert attachment.blob is not None and attachment.blob.file.size == attachment.size


def test_a_file_said_to_be_ogg_that_is_not_fails_clearly(say, tmp_path, enqueued):
    path = tmp_path / "voice.ogg"
    path.write_bytes(np.random.default_rng(3).integers(1, 255, 30_000, dtype=np.uint8).tobytes())
    attachment = store(say, path)
    assert attachment.kind == "other"  # its bytes are no audio; the claim made it wanted
    assert transcribe_attachment(attachment.pk) == "failed"
    attachment.refresh_from_db()
    assert "could not be read as audio" in attachment.failure


def test_silence_fails_as_no_speech(say, tmp_path, enqueued):
    attachment = store(say, encode(np.zeros(48000 * 3, np.int16), tmp_path / "quiet.ogg"))
    assert transcribe_attachment(attachment.pk) == "failed"
    attachment.refresh_from_db()
    assert attachment.failure == "No speech was heard in this recording."


def test_chinese_goes_through_the_remote_server_with_the_parts_as_wav(
    say, tmp_path, enqueued, settings
):
    note = voice_note(tmp_path, CHINESE_PINYIN, voice="cmn-latn-pinyin", name="zh")
    with FakeSTT(text=CHINESE, language="chinese") as server:
        server.configure(settings)
        attachment = store(say, note)
        assert transcribe_attachment(attachment.pk) == "ready"
    attachment.refresh_from_db()
    assert attachment.extracted_text == CHINESE
    transcript = Transcript.objects.get(attachment=attachment)
    assert (transcript.language, transcript.engine) == ("zh", "api:fake-whisper")
    [request] = server.requests
    assert request["fields"]["model"] == "fake-whisper"
    assert request["authorization"] == "Bearer stt-key"
    # The server got the whole recording, decoded to 16 kHz WAV.
    assert abs(request["seconds"] - transcript.duration_seconds) < 0.1


def test_the_local_engine_transcribes_when_the_remote_server_fails(
    say, tmp_path, enqueued, settings
):
    with FakeSTT(status=500) as server:
        server.configure(settings)
        attachment = store(say, voice_note(tmp_path))
        assert transcribe_attachment(attachment.pk) == "ready"
    assert len(server.requests) == 1
    attachment.refresh_from_db()
    assert attachment.transcript.engine == "local:whisper-base"
    assert word_error_rate(ENGLISH, attachment.extracted_text) <= 0.25


def _silent_video(path: Path) -> Path:
    """A WebM with a (black) VP8 picture and two seconds of silent Opus sound."""
    with av.open(str(path), "w", format="webm") as container:
        video = container.add_stream("libvpx", rate=10)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        sound = container.add_stream("libopus", rate=48000)
        sound.layout = "mono"
        black = np.zeros((48, 64, 3), np.uint8)
        for _ in range(20):
            for packet in video.encode(av.VideoFrame.from_ndarray(black, format="rgb24")):
                container.mux(packet)
        for packet in video.encode(None):
            container.mux(packet)
        for start in range(0, 48000 * 2, 960):
            frame = av.AudioFrame.from_ndarray(
                np.zeros((1, 960), np.int16), format="s16", layout="mono"
            )
            frame.sample_rate, frame.pts = 48000, start
            for packet in sound.encode(frame):
                container.mux(packet)
        for packet in sound.encode(None):
            container.mux(packet)
    return path


def test_a_silent_video_is_ready_with_a_note(say, tmp_path, enqueued):
    # A video whose sound track is silence: the video is kept as it is, with a note.
    path = _silent_video(tmp_path / "clip.webm")
    attachment = store(say, path, name="clip.webm", declared="video/webm")
    assert attachment.kind == "video"
    assert transcribe_attachment(attachment.pk) == "ready"
    attachment.refresh_from_db()
    assert attachment.extracted_text == "" and "No speech was heard" in attachment.note


def test_a_silent_recording_fails_with_a_reason(say, tmp_path, enqueued):
    # A WebM whose only track is silence (what a muted MediaRecorder sends) sniffs as audio:
    # a recording in which nobody spoke is failed with why, and kept.
    path = encode(np.zeros(48000 * 2, np.int16), tmp_path / "clip.webm", fmt="webm")
    attachment = store(say, path, name="clip.webm", declared="video/webm")
    assert attachment.kind == "audio"
    assert transcribe_attachment(attachment.pk) == "failed"
    attachment.refresh_from_db()
    assert "No speech was heard" in attachment.failure and attachment.blob is not None


def test_a_turn_waits_longer_for_a_recording_than_for_other_files(
    say, tmp_path, enqueued, settings
):
    from attachments.waiting import files_hold
    from chats.models import TurnHold

    settings.ATTACHMENTS_TURN_WAIT_SECONDS = 30
    message = say("")
    files_hold(message=message, respond=True)  # Telegram holds before it fetches the file
    first = TurnHold.objects.get(message=message).deadline
    attachment_store(message=message, name="v.ogg", data=voice_note(tmp_path).read_bytes())
    later = TurnHold.objects.get(message=message).deadline
    assert (later - first).total_seconds() >= settings.VOICE_TURN_WAIT_SECONDS - 5
