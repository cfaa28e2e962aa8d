"""Decoding and splitting audio, without Django (the transcription child imports it).

`decode` reads any container PyAV's bundled FFmpeg knows (OGG/Opus as Telegram sends voice
notes, MP3, M4A/AAC, WAV, WebM/Opus as browsers record, the sound track of a video) into 16 kHz
mono 16-bit samples, refusing as soon as it passes `max_seconds`: a file never makes the
decoder hold more than the limit. `split` cuts the samples into parts of at most
PART_SECONDS, each cut placed in the quietest moment of its last seconds, so a part ends
between words, not inside one.
"""

from dataclasses import dataclass

import numpy as np

RATE = 16000
PART_SECONDS = 28.0  # Whisper reads 30 s windows: a part fits in one
MIN_PART_SECONDS = 18.0  # a cut is looked for between this and PART_SECONDS
FRAME = 480  # 30 ms at 16 kHz: the unit of the energy measures
# A frame whose RMS (of full scale 1.0) is below this is silence; a part with no frame
# above SPEECH_RMS is not sent to the engine (Whisper "hears" words in silence).
SILENCE_RMS = 0.004
SPEECH_RMS = 0.01
CLIPPED_SHARE = 0.01  # more than this share of samples at full scale: the file is clipped


class AudioUnreadable(Exception):
    """The bytes are no audio the decoder can read: `str(exc)` is a person's reason."""


class AudioTooLong(Exception):
    def __init__(self, max_seconds: float):
        super().__init__(max_seconds)
        self.max_seconds = max_seconds


@dataclass
class Decoded:
    samples: np.ndarray  # int16, mono, RATE Hz
    clipped: bool

    @property
    def seconds(self) -> float:
        return len(self.samples) / RATE


def decode(path: str, *, max_seconds: float) -> Decoded:
    """The audio of `path` (its first audio stream) as 16 kHz mono int16."""
    import av

    limit = int(max_seconds * RATE)
    chunks: list[np.ndarray] = []
    total = 0
    try:
        with av.open(path) as container:
            streams = [s for s in container.streams if s.type == "audio"]
            if not streams:
                raise AudioUnreadable("The file has no sound track.")
            stream = streams[0]
            declared = stream.duration * stream.time_base if stream.duration else None
            if declared is not None and float(declared) > max_seconds + 1:
                raise AudioTooLong(max_seconds)
            resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    chunk = out.to_ndarray().reshape(-1)
                    total += len(chunk)
                    if total > limit + RATE:
                        raise AudioTooLong(max_seconds)
                    chunks.append(chunk.copy())
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1).copy())
    except (AudioUnreadable, AudioTooLong):
        raise
    except av.error.FFmpegError as exc:
        if not chunks:
            raise AudioUnreadable(
                "The file could not be read as audio: it looks damaged, or is not audio "
                "although it says so."
            ) from exc
        # A stream damaged after its start: what came before the damage is kept.
    except (UnicodeDecodeError, ValueError, IndexError) as exc:
        raise AudioUnreadable("The file could not be read as audio: it looks damaged.") from exc
    samples = np.concatenate(chunks).astype(np.int16) if chunks else np.zeros(0, np.int16)
    if len(samples) > limit + RATE:
        raise AudioTooLong(max_seconds)
    clipped = bool(len(samples)) and bool(
        np.count_nonzero(np.abs(samples.astype(np.int32)) >= 32767) / len(samples) > CLIPPED_SHARE
    )
    return Decoded(samples=samples, clipped=clipped)


def frame_rms(samples: np.ndarray) -> np.ndarray:
    """The RMS of each FRAME of `samples` (int16), on a full scale of 1.0."""
    count = len(samples) // FRAME
    if count == 0:
        return np.zeros(0, np.float32)
    frames = samples[: count * FRAME].astype(np.float32).reshape(count, FRAME) / 32768.0
    return np.sqrt(np.mean(frames * frames, axis=1))


def has_speech(samples: np.ndarray) -> bool:
    """Whether any stretch of `samples` is loud enough to be speech (a few frames above
    SPEECH_RMS): silence and a faint hiss are not sent to the engine."""
    return int(np.count_nonzero(frame_rms(samples) > SPEECH_RMS)) >= 5


def split(samples: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) sample offsets of the parts, cut on silence: each part at most
    PART_SECONDS long, its end at the quietest frame between MIN_PART_SECONDS and
    PART_SECONDS (a hard cut only where nothing is quieter than speech)."""
    parts = []
    start, total = 0, len(samples)
    longest, shortest = int(PART_SECONDS * RATE), int(MIN_PART_SECONDS * RATE)
    while total - start > longest:
        window = samples[start + shortest : start + longest]
        rms = frame_rms(window)
        if len(rms):
            quietest = int(np.argmin(rms))
            end = start + shortest + quietest * FRAME + FRAME // 2
        else:
            end = start + longest
        parts.append((start, end))
        start = end
    if total - start > 0:
        parts.append((start, total))
    return parts


def to_float(samples: np.ndarray) -> np.ndarray:
    """int16 samples as the float32 the engines take; a clipped or quiet part is scaled so
    its peak is at 0.9 of full scale."""
    audio = samples.astype(np.float32) / 32768.0
    peak = float(np.max(np.abs(audio))) if len(audio) else 0.0
    if peak > 0.0:
        audio *= 0.9 / peak
    return audio


def wav_bytes(samples: np.ndarray) -> bytes:
    """`samples` as a 16 kHz mono 16-bit WAV file (what a remote engine is sent)."""
    import io
    import wave

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(samples.astype("<i2").tobytes())
    return buffer.getvalue()
