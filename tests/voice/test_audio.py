"""Decoding and splitting (voice.audio, no model): the containers people send decode to the
same 16 kHz mono samples, a lying or endless file stops at the limit, and long audio is cut
in its pauses, never in the middle of speech."""

import av
import numpy as np
import pytest

from tests.voice.speech import encode, read_samples, voice_note
from voice import audio


def _encode_with(samples: np.ndarray, path, container: str, codec: str, rate: int = 48000):
    with av.open(str(path), "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = rate
        frame.pts = 0
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


@pytest.mark.parametrize(
    "container, codec, suffix",
    [("ogg", "libopus", "ogg"), ("mp3", "libmp3lame", "mp3"), ("ipod", "aac", "m4a"),
     ("webm", "libopus", "webm"), ("wav", "pcm_s16le", "wav")],
)  # fmt: skip
def test_the_containers_people_send_decode_to_the_same_length(tmp_path, container, codec, suffix):
    samples = read_samples(voice_note(tmp_path))
    path = _encode_with(samples, tmp_path / f"note.{suffix}", container, codec)
    decoded = audio.decode(str(path), max_seconds=60)
    assert abs(decoded.seconds - len(samples) / 48000) < 0.15
    assert audio.has_speech(decoded.samples) and not decoded.clipped


def test_decoding_stops_at_the_limit_whatever_the_file_says(tmp_path):
    # A WebM stream states no duration (as browsers' recordings): the decoder counts.
    path = encode(np.ones(48000 * 12, np.int16) * 3000, tmp_path / "long.webm", fmt="webm")
    with av.open(str(path)) as container:
        assert container.streams.audio[0].duration is None
    with pytest.raises(audio.AudioTooLong):
        audio.decode(str(path), max_seconds=5)


def test_long_audio_is_cut_in_its_pauses(tmp_path):
    rng = np.random.default_rng(4)
    rate = audio.RATE
    pieces, pauses = [], []
    position = 0
    for seconds in (9, 7, 8, 11, 6, 10, 9):  # "speech" (noise) with 0.6 s pauses between
        speech = (rng.normal(0, 3000, seconds * rate)).astype(np.int16)
        pause = np.zeros(int(0.6 * rate), np.int16)
        pieces += [speech, pause]
        position += len(speech)
        pauses.append((position, position + len(pause)))
        position += len(pause)
    samples = np.concatenate(pieces)
    parts = audio.split(samples)
    assert parts[0][0] == 0 and parts[-1][1] == len(samples)
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))  # no gap, no overlap
    assert all(end - start <= audio.PART_SECONDS * rate for start, end in parts)
    for _, end in parts[:-1]:
        assert any(start <= end <= stop for start, stop in pauses), end / rate


def test_two_hours_are_refused_by_their_duration_without_decoding(tmp_path, monkeypatch):
    """A two-hour WAV (16 kHz mono; a sparse file, so the test writes little): refused by its
    stated duration before a sample is decoded (no resampler is even made). FFmpeg checks a
    header's length against the file's size, so a header that lies is read to the limit
    instead (test_decoding_stops_at_the_limit_whatever_the_file_says)."""
    import struct

    import av as real_av

    two_hours = audio.RATE * 2 * 7200
    header = (
        b"RIFF" + struct.pack("<I", 36 + two_hours) + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, audio.RATE, audio.RATE * 2, 2, 16)
        + b"data" + struct.pack("<I", two_hours)
    )  # fmt: skip
    path = tmp_path / "two-hours.wav"
    with open(path, "wb") as out:
        out.write(header)
        out.seek(len(header) + two_hours - 1)
        out.write(b"\x00")

    def no_decoding(*args, **kwargs):
        raise AssertionError("the file was decoded")

    monkeypatch.setattr(real_av, "AudioResampler", no_decoding)
    with pytest.raises(audio.AudioTooLong):
        audio.decode(str(path), max_seconds=1800)
