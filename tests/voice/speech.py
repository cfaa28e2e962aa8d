"""Real speech for the voice tests: espeak-ng (Debian's package, in .ci/run) speaks a text to
a WAV file, which PyAV encodes as OGG/Opus at 48 kHz mono, as Telegram sends voice notes.
A missing espeak-ng fails the test that needs it (never a skip)."""

import re
import shutil
import subprocess
from pathlib import Path

import av
import numpy as np
import pytest

ENGLISH = (
    "Please remind me to call my sister tomorrow morning. "
    "The meeting with the bank moved to Friday afternoon."
)
# Mandarin as pinyin with tone numbers: Debian's espeak-ng reads hanzi letter by letter (its
# Chinese dictionary is not built), but speaks pinyin as Mandarin.
CHINESE_PINYIN = "jin1 tian1 tian1 qi4 hen3 hao3, wo3 men5 qu4 gong1 yuan2 san4 bu4 ba5."
CHINESE = "今天天气很好，我们去公园散步吧。"


def espeak(text: str, path: Path, *, voice: str = "en", speed: int = 160) -> Path:
    binary = shutil.which("espeak-ng")
    if binary is None:
        pytest.fail("espeak-ng is not installed: apt-get install -y espeak-ng (.ci/run does)")
    subprocess.run(
        [binary, "-v", voice, "-s", str(speed), "-w", str(path), text],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return path


def read_samples(path: Path, rate: int = 48000) -> np.ndarray:
    """Mono int16 samples of any file PyAV reads."""
    chunks = []
    with av.open(str(path)) as container:
        resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
        for frame in container.decode(audio=0):
            chunks.extend(out.to_ndarray().reshape(-1) for out in resampler.resample(frame))
        chunks.extend(out.to_ndarray().reshape(-1) for out in resampler.resample(None))
    return np.concatenate(chunks).astype(np.int16)


def encode(samples: np.ndarray, path: Path, *, rate: int = 48000, fmt: str = "ogg") -> Path:
    """`samples` (mono int16 at `rate`) encoded as Opus in OGG (Telegram's voice notes) or
    as WAV (`fmt="wav"`)."""
    codec = "pcm_s16le" if fmt == "wav" else "libopus"
    with av.open(str(path), "w", format=fmt) as container:
        stream = container.add_stream(codec, rate=rate)
        stream.layout = "mono"
        step = 960
        for start in range(0, len(samples), step):
            chunk = samples[start : start + step].reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(chunk, format="s16", layout="mono")
            frame.sample_rate = rate
            frame.pts = start
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def voice_note(tmp_path: Path, text: str = ENGLISH, *, voice: str = "en", name="note") -> Path:
    """`text` spoken by espeak-ng, as an OGG/Opus voice note."""
    wav = espeak(text, tmp_path / f"{name}.wav", voice=voice)
    return encode(read_samples(wav), tmp_path / f"{name}.ogg")


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Levenshtein distance over words / words of the reference."""
    ref, hyp = words(reference), words(hypothesis)
    previous = list(range(len(hyp) + 1))
    for i, word in enumerate(ref, start=1):
        current = [i] + [0] * len(hyp)
        for j, other in enumerate(hyp, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != other))
        previous = current
    return previous[-1] / max(len(ref), 1)
