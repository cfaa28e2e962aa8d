"""The parent's side of transcription: run `voice.child` on one file, bounded by a wall-clock
timeout (its whole process group killed then) and an address-space limit, pass each progress
line to a callback, and turn whatever happened into an answer or a reason a person can read.
A hang, a bomb or a crash of the decoder or the engine never touches the worker."""

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from attachments.extraction.runner import child_environment
from voice.child import MEMORY_EXIT

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
_CPU_GRACE_SECONDS = 5


class TranscriptionFailed(Exception):
    """`str(exc)` is the reason shown to people."""


class TooLong(TranscriptionFailed):
    pass


def too_long_reason(max_seconds: float) -> str:
    minutes = max_seconds / 60
    limit = f"{minutes:g} minutes" if max_seconds >= 60 else f"{max_seconds:g} seconds"
    return (
        f"The recording is longer than {limit}, the most the hub transcribes; it is kept "
        "untranscribed. Send a shorter recording, or the part that matters."
    )


def run_child(
    request: dict,
    *,
    seconds: float,
    memory_mb: int,
    on_event: Callable[[dict], None] | None = None,
) -> dict:
    """Run the child on `request`; returns its final answer (ok True) or raises
    TranscriptionFailed. `on_event` gets each "decoded" and "part" event as it comes."""
    request = request | {
        "memory_mb": memory_mb,
        "cpu_seconds": int(seconds) * 2 + _CPU_GRACE_SECONDS,
    }
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "voice.child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            cwd=PROJECT_ROOT,
            env=child_environment(keep=("HOME",)),
            start_new_session=True,
        )
        timed_out = threading.Event()

        def _timeout() -> None:
            timed_out.set()
            _kill(process)

        timer = threading.Timer(seconds, _timeout)
        timer.start()
        answer = None
        try:
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.close()
            for line in process.stdout:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("event") == "done":
                    answer = event
                elif on_event is not None:
                    on_event(event)
            process.wait()
        finally:
            timer.cancel()
            if process.poll() is None:
                _kill(process)
                process.wait()
        errors.seek(0)
        tail = errors.read()[-2000:].decode("utf-8", "replace")
    if timed_out.is_set():
        raise TranscriptionFailed(
            f"Transcribing took longer than {seconds:g} seconds, so the hub stopped; the "
            "recording is kept."
        )
    code = process.returncode
    if code == MEMORY_EXIT:
        raise TranscriptionFailed(
            f"Transcribing needed more than {memory_mb} MB of memory, so the hub stopped; "
            "the recording is kept."
        )
    if code != 0 or answer is None:
        logger.warning("transcription child exited with %s: %s", code, tail)
        raise TranscriptionFailed(
            "The transcriber stopped on this recording: it may be damaged. The recording is kept."
        )
    if tail:
        logger.info("transcription child said: %s", tail)
    if not answer.get("ok"):
        if answer.get("too_long"):
            raise TooLong(too_long_reason(float(request["max_seconds"])))
        raise TranscriptionFailed(answer.get("reason") or "The recording could not be transcribed.")
    return answer


def _kill(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
