"""The transcription child on real speech and on bad input (no database): espeak-ng's
speech encoded as Telegram's OGG/Opus comes back as its words; empty, silent, mislabelled,
damaged, clipped and too long recordings each end in a clear answer, and the caller lives."""

import os

import numpy as np
import pytest

from tests.voice.speech import ENGLISH, encode, read_samples, voice_note, word_error_rate
from voice.child import NO_SPEECH
from voice.runner import TooLong, TranscriptionFailed, run_child

# espeak-ng's robotic voice through Whisper base (int8, greedy): measured 0.05-0.10 on this
# text; a transcript this far off means the engine or the decoding broke.
MAX_WER = 0.25


def _request(path, model_cache, **extra):
    return {
        "path": str(path),
        "mode": "local",
        "max_seconds": 1800,
        "threads": 2,
        "language": "",
        "model_cache": str(model_cache),
        "model_dir": "",
        "out_dir": "",
    } | extra


def _run(path, model_cache, events=None, **extra):
    return run_child(
        _request(path, model_cache, **extra),
        seconds=300,
        memory_mb=2048,
        on_event=None if events is None else events.append,
    )


def test_an_english_voice_note_comes_back_as_its_words(tmp_path, model_cache):
    events = []
    answer = _run(voice_note(tmp_path), model_cache, events)
    wer = word_error_rate(ENGLISH, answer["text"])
    assert wer <= MAX_WER, (wer, answer["text"])
    assert answer["language"] == "en"
    assert 5 < answer["seconds"] < 15
    assert events[0]["event"] == "decoded" and events[-1] == {
        "event": "part",
        "done": 1,
        "total": 1,
    }
    assert answer["peak_rss_kb"] < 700 * 1024


def test_long_speech_is_split_on_silence_with_progress(tmp_path, model_cache):
    samples = read_samples(voice_note(tmp_path))
    pause = np.zeros(48000 // 2, np.int16)
    # About 40 s: more than one part; each cut falls in a pause, not inside a word.
    long = np.concatenate([samples, pause] * 5)
    path = encode(long, tmp_path / "long.ogg")
    events = []
    answer = _run(path, model_cache, events)
    decoded = events[0]
    assert decoded["event"] == "decoded" and decoded["parts"] >= 2
    assert [e["done"] for e in events[1:]] == list(range(1, decoded["parts"] + 1))
    assert answer["text"].lower().count("sister") >= 4
    assert word_error_rate(" ".join([ENGLISH] * 5), answer["text"]) <= MAX_WER


def test_a_clipping_recording_is_transcribed_and_said_to_be_clipped(tmp_path, model_cache):
    samples = read_samples(voice_note(tmp_path)).astype(np.int32) * 12
    loud = np.clip(samples, -32768, 32767).astype(np.int16)
    answer = _run(encode(loud, tmp_path / "loud.wav", fmt="wav"), model_cache)
    assert answer["clipped"] is True
    assert word_error_rate(ENGLISH, answer["text"]) <= 0.5, answer["text"]


def test_silence_is_no_speech_without_loading_the_model(tmp_path, model_cache):
    path = encode(np.zeros(48000 * 5, np.int16), tmp_path / "silence.ogg")
    with pytest.raises(TranscriptionFailed) as failure:
        _run(path, model_cache)
    assert str(failure.value) == NO_SPEECH


def test_a_faint_hiss_is_no_speech(tmp_path, model_cache):
    noise = (np.random.default_rng(1).normal(0, 30, 48000 * 4)).astype(np.int16)
    with pytest.raises(TranscriptionFailed, match="No speech"):
        _run(encode(noise, tmp_path / "hiss.ogg"), model_cache)


def test_a_file_that_claims_to_be_ogg_and_is_not_fails_clearly(tmp_path, model_cache):
    path = tmp_path / "voice.ogg"
    path.write_bytes(os.urandom(20_000))
    with pytest.raises(TranscriptionFailed, match="could not be read as audio"):
        _run(path, model_cache)


def test_a_corrupt_opus_stream_fails_clearly_or_keeps_what_came_before(tmp_path, model_cache):
    good = voice_note(tmp_path).read_bytes()
    # The OGG pages' headers stay, the Opus packets after the first page are noise.
    damaged = bytearray(good)
    rng = np.random.default_rng(2)
    for offset in range(200, len(damaged), 7):
        damaged[offset] = int(rng.integers(0, 256))
    path = tmp_path / "damaged.ogg"
    path.write_bytes(bytes(damaged))
    try:
        answer = _run(path, model_cache)
    except TranscriptionFailed as exc:
        assert str(exc) in (NO_SPEECH,) or "could not be read" in str(exc) or "damaged" in str(exc)
    else:
        assert isinstance(answer["text"], str)


def test_an_empty_ogg_container_is_empty(tmp_path, model_cache):
    path = encode(np.zeros(0, np.int16), tmp_path / "empty.ogg")
    with pytest.raises(TranscriptionFailed, match="empty|could not be read|no sound"):
        _run(path, model_cache)


def test_a_recording_over_the_limit_is_refused_before_it_is_transcribed(tmp_path, model_cache):
    path = voice_note(tmp_path)
    with pytest.raises(TooLong) as failure:
        _run(path, model_cache, max_seconds=3)
    assert "longer than 3 seconds" in str(failure.value)
    assert "kept" in str(failure.value)


def test_a_hanging_child_is_killed_at_its_bound(tmp_path, model_cache):
    # A FIFO nobody writes to: the decoder waits forever; the bound kills it.
    fifo = tmp_path / "stuck.ogg"
    os.mkfifo(fifo)
    with pytest.raises(TranscriptionFailed, match="longer than 2 seconds"):
        run_child(_request(fifo, model_cache), seconds=2, memory_mb=2048)


def test_speech_in_two_languages_names_both(tmp_path, model_cache):
    english = read_samples(voice_note(tmp_path))
    german = read_samples(
        voice_note(
            tmp_path,
            "Guten Morgen, ich komme heute etwas später ins Büro, weil der Zug Verspätung hat.",
            voice="de",
            name="de",
        )
    )
    pause = np.zeros(48000 // 2, np.int16)
    # Three English sentences (about 22 s: the first part), then three German ones.
    mixed = np.concatenate([english, pause] * 3 + [german, pause] * 3)
    answer = _run(encode(mixed, tmp_path / "mixed.ogg"), model_cache)
    assert sorted(answer["languages"]) == ["de", "en"], answer
    assert "sister" in answer["text"].lower()


def test_an_engine_over_its_memory_bound_fails_clearly(tmp_path, model_cache):
    with pytest.raises(TranscriptionFailed, match="needed more than 600 MB of memory"):
        run_child(_request(voice_note(tmp_path), model_cache), seconds=120, memory_mb=600)
