"""Real speech for the tests, made where they run: espeak-ng (Debian's speech synthesizer)
speaks a text to WAV, and PyAV encodes it the way Telegram (OGG/Opus voice notes) and
browsers (WebM/Opus from MediaRecorder) send it. A missing espeak-ng fails loudly."""

import io
import shutil
import subprocess
import wave
from functools import cache

import av


def _espeak() -> str:
    found = shutil.which("espeak-ng")
    if found is None:
        raise RuntimeError("espeak-ng is required by the voice tests: apt-get install espeak-ng")
    return found


@cache
def speech_wav(text: str, voice: str = "en") -> bytes:
    """`text` spoken by espeak-ng, as a mono 16-bit WAV file's bytes."""
    done = subprocess.run(
        [_espeak(), "-v", voice, "--stdout", text], capture_output=True, check=True, timeout=60
    )
    return done.stdout


def wav_duration(data: bytes) -> float:
    with wave.open(io.BytesIO(data)) as reader:
        return reader.getnframes() / reader.getframerate()


def _encode(data: bytes, container: str, codec: str, rate: int = 48000) -> bytes:
    out = io.BytesIO()
    with av.open(io.BytesIO(data)) as source, av.open(out, "w", format=container) as target:
        stream = target.add_stream(codec, rate=rate)
        stream.layout = "mono"
        resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
        for frame in source.decode(audio=0):
            for resampled in resampler.resample(frame):
                for packet in stream.encode(resampled):
                    target.mux(packet)
        for resampled in resampler.resample(None):
            for packet in stream.encode(resampled):
                target.mux(packet)
        for packet in stream.encode(None):
            target.mux(packet)
    return out.getvalue()


@cache
def speech_ogg_opus(text: str, voice: str = "en") -> bytes:
    """`text` spoken, as Telegram sends a voice note: OGG with Opus inside."""
    return _encode(speech_wav(text, voice), "ogg", "libopus")


@cache
def speech_webm_opus(text: str, voice: str = "en") -> bytes:
    """`text` spoken, as a browser's MediaRecorder sends it: WebM with Opus inside."""
    return _encode(speech_wav(text, voice), "webm", "libopus")


@cache
def speech_video_mp4(text: str, voice: str = "en") -> bytes:
    """`text` spoken over a black picture, as a phone sends a video: MP4 (MPEG-4 picture,
    AAC sound)."""
    import numpy as np

    wav = speech_wav(text, voice)
    with wave.open(io.BytesIO(wav)) as reader:  # espeak's header from stdout has no length
        seconds = (len(wav) - 44) / (reader.getframerate() * reader.getsampwidth())
    out = io.BytesIO()
    with av.open(io.BytesIO(wav)) as source, av.open(out, "w", format="mp4") as target:
        picture = target.add_stream("mpeg4", rate=10)
        picture.width, picture.height, picture.pix_fmt = 64, 48, "yuv420p"
        sound = target.add_stream("aac", rate=48000)
        sound.layout = "mono"
        black = np.zeros((48, 64, 3), np.uint8)
        for _ in range(max(int(seconds * 10), 1)):
            frame = av.VideoFrame.from_ndarray(black, format="rgb24")
            for packet in picture.encode(frame):
                target.mux(packet)
        for packet in picture.encode(None):
            target.mux(packet)
        resampler = av.AudioResampler(format="fltp", layout="mono", rate=48000)
        for frame in source.decode(audio=0):
            for resampled in resampler.resample(frame):
                for packet in sound.encode(resampled):
                    target.mux(packet)
        for resampled in resampler.resample(None):
            for packet in sound.encode(resampled):
                target.mux(packet)
        for packet in sound.encode(None):
            target.mux(packet)
    return out.getvalue()
